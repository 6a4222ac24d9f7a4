"""Run resync-simulator 1.1.0 (PyPI) as a test upstream, on loopback only.

    python sim_local.py --port PORT [--resources N] [--change-delay S]
        [--max-events N] [--max-changes N] [--event-types create,update,delete]
        [--average-payload BYTES] [--spec-version 1.1] [--no-lastmod]
        [--base-uri URI] [--bind 127.0.0.1] [--seed N]
        [--write-config PATH] [--exit-on-stdin-eof]

Run it with the peers venv's interpreter (scripts/peers.sh install), which has
the `simulator` package. The simulator has no flags for the resource count and
change rate (they live in a YAML file the wheel does not ship); this wrapper
builds that configuration from its flags (`--write-config` also writes it out
as YAML, for reference) and starts the simulator in-process with three fixes:

1. Bind address: the simulator calls HTTPServer.listen(port) with no address,
   i.e. on every interface. Here the listen address defaults to --bind
   (127.0.0.1).
2. Python >= 3.11 removed random.sample() on sets and dict views; the
   simulator calls random.sample(dict.keys(), 1) for every update and delete,
   so the first such event raised and the simulation stopped. Here a
   population that is not a sequence is turned into a list first.
3. The simulator builds its tornado Application with debug=True, which turns
   on autoreload: touching any imported .py file re-executes the process
   (losing its state, and restarting without these fixes). Here autoreload is
   forced off.

Two conveniences for tests:
- after --max-events events the simulator keeps serving (upstream, its main
  thread would stop the HTTP interface and exit);
- with --exit-on-stdin-eof the process exits as soon as its standard input
  reaches end of file, so a parent that holds the write end of a pipe cannot
  leave an orphan behind, however it ends.
"""

import argparse
import logging
import os
import random
import sys
import threading
import time


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", "-p", type=int, required=True)
    ap.add_argument("--bind", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    ap.add_argument("--base-uri", "-b", default="", help="default http://127.0.0.1:PORT")
    ap.add_argument("--resources", type=int, default=20, help="source.number_of_resources")
    ap.add_argument("--change-delay", type=float, default=1.0, help="seconds between change events")
    ap.add_argument("--max-events", type=int, default=-1, help="-1 = change forever")
    ap.add_argument("--max-changes", type=int, default=1000, help="changes the Change List keeps")
    ap.add_argument("--event-types", default="create,update,delete")
    ap.add_argument("--average-payload", type=int, default=1000, help="bytes (payloads are 0..2x)")
    ap.add_argument("--stats-interval", type=int, default=10)
    ap.add_argument("--spec-version", default="1.1", choices=("1.0", "1.1"))
    ap.add_argument("--no-lastmod", action="store_true")
    ap.add_argument("--seed", type=int, default=None, help="seed the random event sequence")
    ap.add_argument("--write-config", default=None, help="also write the YAML config here")
    ap.add_argument("--exit-on-stdin-eof", action="store_true")
    ap.add_argument("--log-level", default="INFO")
    return ap.parse_args(argv)


def build_config(a):
    return {
        "source": {
            "name": "ResourceSync Simulator (rsagg tests)",
            "number_of_resources": a.resources,
            "change_delay": a.change_delay,
            "event_types": [e.strip() for e in a.event_types.split(",") if e.strip()],
            "average_payload": a.average_payload,
            "max_events": a.max_events,
            "stats_interval": a.stats_interval,
        },
        "resource_list_builder": {
            "class": "DynamicResourceListBuilder",
            "uri_path": "resourcelist.xml",
        },
        "changememory": {
            "class": "DynamicChangeList",
            "uri_path": "changelist.xml",
            "max_changes": a.max_changes,
        },
    }


def apply_fixes(bind):
    import tornado.autoreload
    import tornado.tcpserver
    import tornado.web

    # 1. loopback only
    orig_listen = tornado.tcpserver.TCPServer.listen

    def listen(self, port, address=None, *args, **kwargs):
        return orig_listen(self, port, address or bind, *args, **kwargs)

    tornado.tcpserver.TCPServer.listen = listen

    # 2. random.sample on dict views (Python >= 3.11)
    orig_sample = random.sample

    def sample(population, k, *args, **kwargs):
        if not isinstance(population, (list, tuple, range, str)):
            population = list(population)
        return orig_sample(population, k, *args, **kwargs)

    random.sample = sample

    # 3. no autoreload (debug=True would switch it on)
    orig_init = tornado.web.Application.__init__

    def app_init(self, *args, **settings):
        settings["autoreload"] = False
        orig_init(self, *args, **settings)

    tornado.web.Application.__init__ = app_init
    tornado.autoreload.start = lambda *args, **kwargs: None


def watch_stdin():
    def run():
        try:
            while sys.stdin.buffer.read(4096):
                pass
        except Exception:
            pass
        os._exit(0)

    threading.Thread(target=run, name="stdin-eof", daemon=True).start()


def main(argv):
    a = parse_args(argv)
    if a.exit_on_stdin_eof:
        watch_stdin()
    logging.basicConfig(
        level=getattr(logging, a.log_level.upper(), logging.INFO),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stdout,
    )
    if a.seed is not None:
        random.seed(a.seed)
    config = build_config(a)
    if a.write_config:
        import yaml

        with open(a.write_config, "w") as f:
            yaml.safe_dump(config, f, sort_keys=False)

    apply_fixes(a.bind)
    from simulator.changememory import DynamicChangeList
    from simulator.http import HTTPInterface
    from simulator.source import DynamicResourceListBuilder, Source

    base_uri = a.base_uri or "http://127.0.0.1:%d" % a.port
    source = Source(config["source"], base_uri, a.port, a.spec_version, a.no_lastmod)
    source.add_resource_list_builder(
        DynamicResourceListBuilder(source, config["resource_list_builder"])
    )
    source.add_changememory(DynamicChangeList(source, config["changememory"]))
    source.bootstrap()

    http = HTTPInterface(source)
    http.daemon = True
    http.start()
    source.simulate_changes()
    # max_events reached: keep serving the final state until killed
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except KeyboardInterrupt:
        pass
