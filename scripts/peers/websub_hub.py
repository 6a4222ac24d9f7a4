"""flask-websub's stock WebSub hub on 127.0.0.1, for rsagg's end-to-end tests.

Usage: websub_hub.py --mode eager|delayed --data-dir DIR [--port 0] [lease and retry options]

Prints exactly one line `listening http://127.0.0.1:PORT` on stdout once the socket accepts
connections (port 0 picks a free port); the hub URL is `http://127.0.0.1:PORT/`. Everything
else (request log, flask-websub's warnings, the worker's log) goes to stderr.

flask-websub (0.4.1) is used as shipped: subscribe/unsubscribe and WebSub `hub.mode=publish`
(PUBLISH_SUPPORTED), which makes the hub GET the topic and relay that response's body and
headers. It does not know the ResourceSync 1.0.1 publish form (payload in the POST body):
no shim is added here, on purpose, so the tests see what a stock hub does.

Its Hub needs a Celery app for its tasks (verification, topic fetch, each delivery, retries):

- `--mode eager`: `task_always_eager=True` with the `memory://` broker: every task runs inside
  the HTTP request that queued it. The verification GET happens before the subscribe request
  is answered 202, all deliveries (and their retries, which Celery runs at once, ignoring the
  countdown) before the publish request is answered 202.
- `--mode delayed`: not eager. Tasks go through kombu's `memory://` transport to a real Celery
  worker (`celery.contrib.testing.worker.start_worker`: a `WorkController`, solo pool, in a
  thread of this process). The subscribe and publish requests are answered 202 at once and the
  worker verifies and delivers afterwards; failed deliveries are retried with flask-websub's
  randomised exponential countdown (ETA tasks, `--backoff-base`). The memory transport lives in
  this process only, which is exactly where both the web server and the worker run: no broker
  process, no files, nothing to clean up, and it cannot be reached from outside. The transport
  is polled every 50 ms (kombu's default is 1 s) so a test does not wait for it.

SQLite storage (`DIR/hub.sqlite3`) lives in the data directory the caller owns (the test
harness makes a temp dir per hub and removes it). The storage logs one line
`stored subscription callback=URL topic=URL lease_seconds=N` when a verified subscription is
written (and `removed subscription …` when one is deleted): a verification GET is answered
before the hub stores the subscription, so a test that publishes right after its callback
answered would race the hub; it waits for this line instead. Nothing else is changed.
"""

import argparse
import logging
import os
import signal
import sys
import threading

from celery import Celery
from flask import Flask
from flask_websub.hub import Hub, SQLite3HubStorage
from werkzeug.serving import make_server


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("eager", "delayed"), required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--data-dir", required=True, help="directory for the SQLite database")
    # flask-websub's lease bounds (its defaults: 60 s, 10 days, 31 days). A low minimum lets a
    # test watch a lease expire.
    ap.add_argument("--min-lease", type=int, default=1)
    ap.add_argument("--default-lease", type=int, default=864000)
    ap.add_argument("--max-lease", type=int, default=2678400)
    # Delivery retries (flask-websub's defaults: 10 attempts, countdown uniform(0, 8 * 2^n) s,
    # 3 s timeout per request). Small values keep a test with a failing subscriber short.
    ap.add_argument("--max-attempts", type=int, default=5)
    ap.add_argument("--backoff-base", type=float, default=0.2)
    ap.add_argument("--request-timeout", type=float, default=3.0)
    return ap.parse_args()


class LoggingStorage(SQLite3HubStorage):
    """flask-websub's SQLite storage, unchanged, plus a log line per stored or removed
    subscription (see the module docs)."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        topic, callback = key
        logging.getLogger("websub_hub").info(
            "stored subscription callback=%s topic=%s lease_seconds=%s",
            callback, topic, value["lease_seconds"])

    def __delitem__(self, key):
        super().__delitem__(key)
        topic, callback = key
        logging.getLogger("websub_hub").info(
            "removed subscription callback=%s topic=%s", callback, topic)


def main():
    args = parse_args()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    log = logging.getLogger("websub_hub")

    app = Flask("rsagg_test_hub")
    app.config.update(
        PUBLISH_SUPPORTED=True,  # the WebSub `hub.mode=publish` form
        HUB_MIN_LEASE_SECONDS=args.min_lease,
        HUB_DEFAULT_LEASE_SECONDS=args.default_lease,
        HUB_MAX_LEASE_SECONDS=args.max_lease,
    )

    celery = Celery("rsagg_test_hub", broker="memory://")
    if args.mode == "eager":
        celery.conf.update(task_always_eager=True, task_eager_propagates=False)
    else:
        celery.conf.update(
            broker_transport_options={"polling_interval": 0.05},
            worker_hijack_root_logger=False,
            task_acks_late=False,
        )

    os.makedirs(args.data_dir, exist_ok=True)
    storage = LoggingStorage(os.path.join(args.data_dir, "hub.sqlite3"))
    # SIGNATURE_ALGORITHM is left at flask-websub's default (sha512) on purpose.
    hub = Hub(
        storage,
        celery,
        MAX_ATTEMPTS=args.max_attempts,
        BACKOFF_BASE=args.backoff_base,
        REQUEST_TIMEOUT=args.request_timeout,
    )
    # url_prefix "/" makes the hub endpoint POST / (like `rsagg hub`).
    app.register_blueprint(hub.build_blueprint(url_prefix="/"))

    @app.get("/healthz")
    def healthz():
        return "ok\n"

    worker_cm = None
    if args.mode == "delayed":
        from celery.contrib.testing.worker import start_worker

        worker_cm = start_worker(
            celery,
            pool="solo",
            concurrency=1,
            loglevel="INFO",
            perform_ping_check=False,
            shutdown_timeout=5.0,
        )
        worker_cm.__enter__()
        log.info("celery worker started (memory transport, solo pool, in-process thread)")

    server = make_server(args.host, args.port, app, threaded=True)
    port = server.socket.getsockname()[1]

    def stop(signum, _frame):
        log.info("signal %d: shutting down", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("flask-websub hub, mode %s, http://%s:%d/", args.mode, args.host, port)
    print(f"listening http://{args.host}:{port}", flush=True)
    server.serve_forever()
    # The worker thread is a daemon: exit without waiting for queued retries.
    os._exit(0)


if __name__ == "__main__":
    main()
