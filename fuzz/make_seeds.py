#!/usr/bin/env python3
"""Writes the generated seeds of the fuzz targets into fuzz/seeds/<target>/ (committed; run
again only to change them). The spec examples themselves (tests/fixtures/) and the pipeline
files (pipelines/) are used as seeds directly by scripts/fuzz.sh and are not copied here.

    python3 fuzz/make_seeds.py
"""
import io
import os
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "tests", "fixtures", "spec-1.1")
SEEDS = os.path.join(HERE, "seeds")


def write(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def body(n, salt):
    """n bytes of text that compresses, but not to nothing."""
    line = ("%s line of a resource body\n" % salt).encode()
    out = bytearray()
    i = 0
    while len(out) < n:
        out += b"%05d " % i + line
        i += 1
    return bytes(out[:n])


def package(manifest, files, method=zipfile.ZIP_DEFLATED, extra=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        z.writestr("manifest.xml", manifest)
        for name, data in files:
            z.writestr(name, data)
        for name in extra:
            z.writestr(name, b"")
    return buf.getvalue()


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


# dump_zip: whole packages, the manifests of the spec's dump examples with their bitstreams
# at the declared lengths (Resource Dump Manifest, spec 11.2; Change Dump Manifest, 13.2).
write("dump_zip", "ex5-stored.zip", package(
    fixture("resourcesync_ex_5.xml"),
    [("resources/res1", body(300, "res1")), ("resources/res2", body(500, "res2"))],
    method=zipfile.ZIP_STORED))
write("dump_zip", "ex18-deflated.zip", package(
    fixture("resourcesync_ex_18.xml"),
    [("resources/res1", body(8876, "res1")), ("resources/res2", body(14599, "res2"))]))
write("dump_zip", "ex23-changedump.zip", package(
    fixture("resourcesync_ex_23.xml"),
    [("changes/res7.html", body(4339, "res7")), ("changes/res9.pdf", body(38297, "res9")),
     ("changes/res7-v2.html", body(5426, "res7v2"))]))
# A file no entry names, a directory entry, a length that disagrees.
write("dump_zip", "ex5-unlisted-dir.zip", package(
    fixture("resourcesync_ex_5.xml"),
    [("resources/res1", body(10, "a")), ("resources/res2", body(20, "b")),
     ("extra/unlisted.txt", b"nobody names me")],
    extra=("resources/",)))
write("dump_zip", "ex18-short.zip", package(
    fixture("resourcesync_ex_18.xml"),
    [("resources/res1", body(100, "res1")), ("resources/res2", body(14599, "res2"))]))

# link_header: RFC 8288 section 3.5's examples, CN 1.0.1 example 2, ResourceSync 6.3.3.
LINKS = {
    "rfc8288-1": "<http://example.com/TheBook/chapter2>; rel=\"previous\";\n title=\"previous chapter\"",
    "rfc8288-2": "</>; rel=\"http://example.net/foo\"",
    "rfc8288-3": "</terms>; rel=\"copyright\"; anchor=\"#foo\"",
    "rfc8288-4": "</TheBook/chapter2>;\n rel=\"previous\"; title*=UTF-8'de'letztes%20Kapitel,\n"
                 " </TheBook/chapter4>;\n rel=\"next\"; title*=UTF-8'de'n%c3%a4chstes%20Kapitel",
    "rfc8288-5": "<http://example.org/>;\n rel=\"start http://example.net/relation/other\"",
    "cn-example-2": "<http://example.com/dataset1/change/> ; rel=\"self\",\n"
                    " <http://hub.example.org/websub/> ; rel=\"hub\",\n"
                    " <http://www.example.com/dataset1/capabilitylist.xml> ; rel=\"resourcesync\"",
    "rs-6.3.3": "<http://example.com/dataset1/capabilitylist.xml>;\n rel=\"resourcesync\"",
    "with-base": "http://example.com/a/b/page.html\n\n<../c.xml>; rel=resourcesync; type=\"text/xml\", <?q=1>; rel=\"alternate ResourceSync\"",
}
for name, text in LINKS.items():
    write("link_header", name, text)

# html_links: ResourceSync 6.3.3's HTML link, with <base>, comments, scripts, odd quoting.
HTML = {
    "rs-6.3.3.html": "<html>\n  <head>\n    <link rel=\"resourcesync\"\n"
                     "          href=\"http://example.com/dataset1/capabilitylist.xml\"/>\n"
                     "  </head>\n  <body>...</body>\n</html>\n",
    "base.html": "http://example.com/a/page.html\n\n<head><base href=\"http://other.example.org/x/\">"
                 "<link rel=\"resourcesync\" href=\"cl.xml\"><link rel=resourcesync href=/abs.xml></head>",
    "mixed.html": "<!DOCTYPE html><HTML><head>\n<!-- <link rel=\"resourcesync\" href=\"/commented-out.xml\"> -->\n"
                  "<script>var s = '<link rel=\"resourcesync\" href=\"/in-script.xml\">';</script>\n"
                  "<link rel=stylesheet href=/style.css>\n"
                  "<LINK REL=\"Alternate ResourceSync\" HREF='capabilitylist.xml?a=1&amp;b=2'/>\n"
                  "<link href=/second.xml rel=resourcesync>\n<title>a <link> in a title</title>\n"
                  "<textarea><link rel=resourcesync href=/ta.xml></textarea></head></html>",
    # Character references, and text that holds one (`&lt;` must survive escaping).
    "escaped-reference.html": "<title>a &lt; b</title><link rel=resourcesync href=\"/a?x=&amp;lt;b\">",
}
for name, text in HTML.items():
    write("html_links", name, text)

# websub_form: first byte = content type (0 form, 1 XML, 2 text/plain, 3 none); Link
# header lines up to a blank line; then the body.
FORM = "\x00"
XML = "\x01"
WEBSUB = {
    "subscribe": FORM + "\n\nhub.mode=subscribe&hub.topic=http%3A%2F%2Fexample.com%2Fdataset1%2Fchange%2F"
                 "&hub.callback=http%3A%2F%2Fsubscriber.example.org%2Fcb%3Fx%3D1&hub.lease_seconds=86400"
                 "&hub.secret=s3cret",
    "unsubscribe": FORM + "\n\nhub.mode=unsubscribe&hub.topic=http://example.com/t/&hub.callback=https://s.example.net/c",
    "publish": FORM + "\n\nhub.mode=publish&hub.url=http%3A%2F%2Fexample.com%2Fdataset1%2Fchange%2F",
    "private-callback": FORM + "\n\nhub.mode=subscribe&hub.topic=http://t.example/&hub.callback=http://[::ffff:127.0.0.1]:8080/",
    "verification": FORM + "\n\nhub.mode=subscribe&hub.topic=http%3A%2F%2Fexample.com%2Fdataset1%2Fchange%2F"
                    "&hub.challenge=5a8f3e1c&hub.lease_seconds=86400",
    "denial": FORM + "\n\nhub.mode=denied&hub.topic=http://example.com/t/&hub.reason=not+allowed",
}
cn = open(os.path.join(HERE, "..", "tests", "fixtures", "notification-1.0.1", "cn_ex_1.xml")).read()
WEBSUB["cn-publish"] = (XML + "<http://example.com/dataset1/change/> ; rel=\"self\"\n"
                        "<http://hub.example/> ; rel=\"hub\"\n\n" + cn)
WEBSUB["cn-publish-no-links"] = XML + "\n\n" + cn
for name, text in WEBSUB.items():
    write("websub_form", name, text)
