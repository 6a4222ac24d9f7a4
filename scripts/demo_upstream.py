#!/usr/bin/env python3
"""The demo's bundled sample upstreams: a small ResourceSync Source and a small OAI-PMH 2.0
repository, served on loopback.

Python standard library only. It writes a Source (Source Description at
/.well-known/resourcesync, one Capability List, a Resource List, a Change List with created,
updated and deleted resources, and the resources themselves) into DIR with absolute URLs for
the port it bound, answers OAI-PMH requests at /oai (Identify, ListMetadataFormats,
ListRecords in pages of 5 with resumptionTokens, GetRecord: 12 Dublin Core records, one of
them deleted and kept as such), prints `listening http://127.0.0.1:PORT` and serves until
killed.

    python3 scripts/demo_upstream.py DIR [--port N]
"""
import hashlib
import http.server
import os
import socketserver
import sys
import urllib.parse
from datetime import datetime, timedelta, timezone

NS = ('xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
      'xmlns:rs="http://www.openarchives.org/rs/terms/"')


def w3c(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def write(root, path, data):
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def build(root, base):
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    resources = {}
    for i in range(1, 41):
        kind = "json" if i % 4 == 0 else "txt"
        body = (f'{{"id": {i}, "title": "Record {i}"}}\n' if kind == "json"
                else f"Sample resource {i} of the rsagg demo upstream.\n" * (1 + i % 5))
        resources[f"/res/{i}.{kind}"] = (body.encode(), t0 + timedelta(hours=i),
                                          "application/json" if kind == "json" else "text/plain")
    for path, (body, _, _) in resources.items():
        write(root, path, body)

    def md(body, mime):
        return (f'hash="md5:{hashlib.md5(body).hexdigest()} '
                f'sha-256:{hashlib.sha256(body).hexdigest()}" length="{len(body)}" type="{mime}"')

    at = t0 + timedelta(days=3)
    urls = "\n".join(
        f'  <url><loc>{base}{p}</loc><lastmod>{w3c(t)}</lastmod><rs:md {md(b, m)}/></url>'
        for p, (b, t, m) in sorted(resources.items()))
    write(root, "/resourcelist.xml", f'''<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS}>
  <rs:ln rel="up" href="{base}/capabilitylist.xml"/>
  <rs:md capability="resourcelist" at="{w3c(at)}" completed="{w3c(at)}"/>
{urls}
</urlset>
''')
    # Changes after the Resource List's `at`: two new resources, one update, one deletion.
    changes = []
    for n, i in enumerate((41, 42)):
        body = f"Resource {i}, created after the baseline.\n".encode()
        write(root, f"/res/{i}.txt", body)
        changes.append((f"/res/{i}.txt", "created", at + timedelta(minutes=10 + n), body, "text/plain"))
    upd = f"Sample resource 3 of the rsagg demo upstream, revised.\n".encode()
    write(root, "/res/3.txt", upd)
    changes.append(("/res/3.txt", "updated", at + timedelta(minutes=20), upd, "text/plain"))
    os.remove(os.path.join(root, "res/5.txt"))
    changes.append(("/res/5.txt", "deleted", at + timedelta(minutes=30), None, None))
    entries = []
    for p, change, t, body, mime in changes:
        extra = f" {md(body, mime)}" if body is not None else ""
        entries.append(f'  <url><loc>{base}{p}</loc><lastmod>{w3c(t)}</lastmod>'
                       f'<rs:md change="{change}" datetime="{w3c(t)}"{extra}/></url>')
    write(root, "/changelist.xml", f'''<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS}>
  <rs:ln rel="up" href="{base}/capabilitylist.xml"/>
  <rs:md capability="changelist" from="{w3c(at - timedelta(days=1))}"/>
{chr(10).join(entries)}
</urlset>
''')
    write(root, "/capabilitylist.xml", f'''<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS}>
  <rs:ln rel="up" href="{base}/.well-known/resourcesync"/>
  <rs:md capability="capabilitylist"/>
  <url><loc>{base}/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>
  <url><loc>{base}/changelist.xml</loc><rs:md capability="changelist"/></url>
</urlset>
''')
    write(root, "/.well-known/resourcesync", f'''<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS}>
  <rs:md capability="description"/>
  <url><loc>{base}/capabilitylist.xml</loc><rs:md capability="capabilitylist"/></url>
</urlset>
''')


# The OAI-PMH repository: (identifier, datestamp, title or None for a deleted record).
OAI_RECORDS = [(f"oai:demo:{i}", f"2026-01-{i:02d}T12:00:00Z",
                None if i == 7 else f"Demo record {i}") for i in range(1, 13)]
OAI_PAGE = 5


def oai_record(ident, datestamp, title):
    if title is None:
        return (f'<record><header status="deleted"><identifier>{ident}</identifier>'
                f'<datestamp>{datestamp}</datestamp></header></record>')
    return (f'<record><header><identifier>{ident}</identifier><datestamp>{datestamp}</datestamp>'
            f'<setSpec>demo</setSpec></header><metadata>'
            f'<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
            f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title>'
            f'<dc:identifier>{ident}</dc:identifier><dc:type>Text</dc:type></oai_dc:dc>'
            f'</metadata></record>')


def oai_answer(base, query):
    """The response to one OAI-PMH request (OAI-PMH 2.0 sections 3 and 4)."""
    verb = query.get("verb", "")
    if verb == "Identify":
        body = (f"<Identify><repositoryName>rsagg demo repository</repositoryName>"
                f"<baseURL>{base}/oai</baseURL><protocolVersion>2.0</protocolVersion>"
                f"<adminEmail>nobody@example.org</adminEmail>"
                f"<earliestDatestamp>2026-01-01T00:00:00Z</earliestDatestamp>"
                f"<deletedRecord>persistent</deletedRecord>"
                f"<granularity>YYYY-MM-DDThh:mm:ssZ</granularity></Identify>")
    elif verb == "ListMetadataFormats":
        body = ("<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix>"
                "<schema>http://www.openarchives.org/OAI/2.0/oai_dc.xsd</schema>"
                "<metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace>"
                "</metadataFormat></ListMetadataFormats>")
    elif verb == "GetRecord":
        found = [r for r in OAI_RECORDS if r[0] == query.get("identifier")]
        body = (f"<GetRecord>{oai_record(*found[0])}</GetRecord>" if found else
                '<error code="idDoesNotExist">no such record</error>')
    elif verb == "ListRecords":
        token = query.get("resumptionToken")
        if token is not None:
            start, frm, until = token.split("|")
        else:
            start, frm, until = "0", query.get("from", ""), query.get("until", "")
        start = int(start)
        chosen = [r for r in OAI_RECORDS
                  if (not frm or r[1] >= frm) and (not until or r[1] <= until)]
        if not chosen:
            body = '<error code="noRecordsMatch">no records match</error>'
        else:
            page = "".join(oai_record(*r) for r in chosen[start:start + OAI_PAGE])
            nxt = start + OAI_PAGE
            if nxt < len(chosen):
                page += (f'<resumptionToken completeListSize="{len(chosen)}" cursor="{start}">'
                         f'{nxt}|{frm}|{until}</resumptionToken>')
            elif start > 0:
                page += f'<resumptionToken completeListSize="{len(chosen)}" cursor="{start}"/>'
            body = f"<ListRecords>{page}</ListRecords>"
    else:
        body = '<error code="badVerb">not an OAI-PMH verb</error>'
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
            f'<responseDate>{now}</responseDate><request>{base}/oai</request>{body}</OAI-PMH>')


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {".xml": "application/xml", ".txt": "text/plain",
                      ".json": "application/json", "": "application/xml"}
    base = ""

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path != "/oai":
            return super().do_GET()
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        data = oai_answer(self.base, query).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/xml; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingTCPServer):
    # SO_REUSEADDR before bind: the demo prints a command that starts this server again on
    # the port it had, and without it the connections it closed (in TIME_WAIT for a minute)
    # would make that bind fail with `Address already in use`.
    allow_reuse_address = True
    daemon_threads = True


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 0
    os.makedirs(root, exist_ok=True)
    handler = lambda *a, **k: Handler(*a, directory=root, **k)
    with Server(("127.0.0.1", port), handler) as srv:
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        Handler.base = base
        build(root, base)
        print(f"listening {base}", flush=True)
        srv.serve_forever()


if __name__ == "__main__":
    main()
