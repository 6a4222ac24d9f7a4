"""An OAI-PMH 2.0 data provider for rsagg's tests, built on pyoai's server (PyPI `pyoai`).

The repository is a JSON file, read again whenever it changes, so a test edits it between
harvests (updates, creations, deletions):

    {"granularity": "YYYY-MM-DDThh:mm:ssZ",     # or "YYYY-MM-DD"
     "deletedRecord": "persistent",            # or "no", "transient"
     "earliestDatestamp": "2000-01-01T00:00:00Z",
     "records": [{"identifier": "oai:test:1", "datestamp": "2024-01-01T00:00:00Z",
                  "sets": ["a"], "deleted": false,
                  "dc": {"title": ["…"], "description": ["…"]}}]}

pyoai writes the responses (`BatchingServer`: `--batch` records a page, then a
`resumptionToken`). Quirks of real providers, on demand (all off by default):

    --ignore-from         answer ListRecords as if no `from`/`until` was given
    --busy N              answer the first N requests 503 with `Retry-After: 1`
    --expire-token N      answer the Nth request that carries a resumptionToken
                          with `badResumptionToken` (an expired token)

Usage: python oai_provider.py --data repo.json [--port 0] [--batch 10] [quirks]
It prints `listening http://127.0.0.1:PORT/oai` on stdout once it accepts requests, and
counts requests per verb at `GET /counts` (JSON), for the tests and the benchmark.
"""

import argparse
import cgi
import datetime
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# pyoai 2.5 decodes resumption tokens with `cgi.parse_qs`, which Python 3.8 removed (it
# lives on as urllib.parse.parse_qs, same signature).
if not hasattr(cgi, "parse_qs"):
    cgi.parse_qs = urllib.parse.parse_qs

from oaipmh import common, error, metadata, server  # noqa: E402

UTC = datetime.timezone.utc


def parse_datestamp(text):
    text = text.strip()
    if len(text) == 10:
        return datetime.datetime.strptime(text, "%Y-%m-%d")
    return datetime.datetime.strptime(text.rstrip("Z"), "%Y-%m-%dT%H:%M:%S")


class Repository:
    """The JSON file, re-read when its modification time changes."""

    def __init__(self, path, ignore_from):
        self.path = path
        self.ignore_from = ignore_from
        self.lock = threading.Lock()
        self.mtime = None
        self.doc = None

    def load(self):
        with self.lock:
            st = os.stat(self.path)
            key = (st.st_mtime_ns, st.st_size)
            if key != self.mtime:
                with open(self.path, encoding="utf-8") as f:
                    self.doc = json.load(f)
                # Parsed and sorted once per version of the file, not per request: a page
                # then costs its records, not the whole repository (at 100,000 records,
                # parsing and sorting everything for each page took 2 s a page).
                self.ordered = sorted(
                    ((parse_datestamp(r["datestamp"]), r) for r in self.doc["records"]),
                    key=lambda p: (p[0], p[1]["identifier"]),
                )
                self.by_id = {r["identifier"]: r for r in self.doc["records"]}
                self.selections = {}
                self.mtime = key
            return self.doc

    # IBatchingOAI, as pyoai's BatchingServer calls it.
    def identify(self):
        doc = self.load()
        return common.Identify(
            repositoryName=doc.get("name", "rsagg test repository"),
            baseURL=doc.get("baseURL", "http://127.0.0.1/oai"),
            protocolVersion="2.0",
            adminEmails=["nobody@example.org"],
            earliestDatestamp=parse_datestamp(
                doc.get("earliestDatestamp", "2000-01-01T00:00:00Z")
            ),
            deletedRecord=doc.get("deletedRecord", "persistent"),
            granularity=doc.get("granularity", "YYYY-MM-DDThh:mm:ssZ"),
            compression=["identity"],
            toolkit_description=False,
        )

    def listMetadataFormats(self, identifier=None):
        if identifier is not None and self._record(identifier) is None:
            raise error.IdDoesNotExistError(identifier)
        return [
            (
                "oai_dc",
                "http://www.openarchives.org/OAI/2.0/oai_dc.xsd",
                "http://www.openarchives.org/OAI/2.0/oai_dc/",
            )
        ]

    def listSets(self, cursor=0, batch_size=10):
        sets = sorted({s for r in self.load()["records"] for s in r.get("sets", [])})
        return [(s, s, None) for s in sets][cursor : cursor + batch_size]

    def _record(self, identifier):
        self.load()
        return self.by_id.get(identifier)

    def _selected(self, metadataPrefix, set=None, from_=None, until=None):
        """The records a list selects, in (datestamp, identifier) order; the same selection
        is kept for the pages after its first (until the file changes)."""
        if metadataPrefix != "oai_dc":
            raise error.CannotDisseminateFormatError(metadataPrefix)
        if self.ignore_from:
            from_ = until = None
        self.load()
        with self.lock:
            key = (set, from_, until)
            out = self.selections.get(key)
            if out is None:
                out = [
                    r
                    for when, r in self.ordered
                    if (from_ is None or when >= from_)
                    and (until is None or when <= until)
                    and (set is None or set in r.get("sets", []))
                ]
                # A few lists at once at most (one harvest, its restarts).
                if len(self.selections) > 8:
                    self.selections.clear()
                self.selections[key] = out
        if not out:
            raise error.NoRecordsMatchError("no records match")
        return out

    def _as_oai(self, r):
        header = common.Header(
            None,
            r["identifier"],
            parse_datestamp(r["datestamp"]),
            r.get("sets", []),
            bool(r.get("deleted")),
        )
        if r.get("deleted"):
            return header, None, None
        return header, common.Metadata(None, r.get("dc", {})), None

    def listRecords(self, metadataPrefix, set=None, from_=None, until=None, cursor=0,
                    batch_size=10):
        chosen = self._selected(metadataPrefix, set, from_, until)
        return [self._as_oai(r) for r in chosen[cursor : cursor + batch_size]]

    def listIdentifiers(self, metadataPrefix, set=None, from_=None, until=None, cursor=0,
                        batch_size=10):
        chosen = self._selected(metadataPrefix, set, from_, until)
        return [self._as_oai(r)[0] for r in chosen[cursor : cursor + batch_size]]

    def getRecord(self, metadataPrefix, identifier):
        if metadataPrefix != "oai_dc":
            raise error.CannotDisseminateFormatError(metadataPrefix)
        r = self._record(identifier)
        if r is None:
            raise error.IdDoesNotExistError(identifier)
        return self._as_oai(r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--ignore-from", action="store_true")
    ap.add_argument("--busy", type=int, default=0)
    ap.add_argument("--expire-token", type=int, default=0)
    args = ap.parse_args()

    repo = Repository(args.data, args.ignore_from)
    registry = metadata.MetadataRegistry()
    registry.registerWriter("oai_dc", server.oai_dc_writer)
    provider = server.BatchingServer(repo, registry, resumption_batch_size=args.batch)
    lock = threading.Lock()
    state = {"busy": args.busy, "tokens": 0, "counts": {}}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, status, body, ctype, extra=()):
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for k, v in extra:
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/counts":
                with lock:
                    body = json.dumps(state["counts"])
                return self.answer(200, body, "application/json")
            if url.path != "/oai":
                return self.answer(404, "not found\n", "text/plain")
            query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
            verb = query.get("verb", "")
            with lock:
                state["counts"][verb] = state["counts"].get(verb, 0) + 1
                if state["busy"] > 0:
                    state["busy"] -= 1
                    busy = True
                else:
                    busy = False
                expire = False
                if "resumptionToken" in query:
                    state["tokens"] += 1
                    expire = state["tokens"] == args.expire_token
            if busy:
                return self.answer(503, "busy\n", "text/plain", [("Retry-After", "1")])
            if expire:
                query = dict(query, resumptionToken="expired")
            xml = provider.handleRequest(query)
            if isinstance(xml, bytes):
                xml = xml.decode("utf-8")
            self.answer(200, xml, "text/xml; charset=utf-8")

        do_HEAD = do_GET

    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print("listening http://127.0.0.1:%d/oai" % httpd.server_address[1], flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
