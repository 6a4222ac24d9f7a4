#!/usr/bin/env python3
"""Benchmark the Python `resync` library (2.0.1) on ResourceSync documents.

One operation per process so that the peak RSS reported is that of a single
operation:

  resync_docbench.py write --kind changelist|resourcelist-index --entries N --out PATH
  resync_docbench.py parse --kind changelist|resourcelist-index --entries N --path PATH

Prints exactly one JSON line on stdout:

  {"tool": "resync", "op": "write"|"parse", "kind": KIND, "entries": N,
   "seconds": FLOAT, "bytes": INT, "peak_rss_kib": INT}

`seconds` covers only the timed operation (time.perf_counter()):
  write: the resync `write(basename=PATH)` call (serialisation, file writing,
         and for an index the md5 of each part), not building the in-memory
         list of Resource objects;
  parse: the resync `read(uri=PATH)` call (index and all parts, every entry
         materialised as a resync Resource).
`bytes` is the total size of all files written / read (index + parts).
`peak_rss_kib` is getrusage(RUSAGE_SELF).ru_maxrss (KiB on Linux) at exit.

Entries i = 0..N-1 (identical to what the Rust bench generates):
  loc      http://example.com/res/{i}
  lastmod  2013-01-03T00:00:00Z + i seconds (YYYY-MM-DDThh:mm:ssZ)
  hash     md5:<hex md5 of ASCII "res{i}">
  length   1000 + i % 1000
  type     text/html
  change   created/updated/deleted by i % 3, datetime = lastmod (changelist)

changelist: one Change List document with all N entries (never split),
  <rs:md capability="changelist" from="2013-01-03T00:00:00Z"/> and
  <rs:ln rel="up" href="http://example.com/capabilitylist.xml"/>.
resourcelist-index: Resource List Index (<rs:md capability="resourcelist"
  at="2013-01-03T00:00:00Z"/>, same up link) with parts of at most 50,000
  entries. resync names the parts PATH minus ".xml" + "%05d" + ".xml",
  numbered from 00000 (e.g. rl.xml -> rl00000.xml, rl00001.xml, ...) and
  writes their <loc> as file:// URIs (absolute, percent-encoded) of the part
  files. resync itself only writes an index when N > 50,000; for smaller N this
  script writes index + one part with the same resync calls (see
  write_single_part_index).

Parsing accepts an index whose part <loc>s are file:// URIs (opened directly,
e.g. Rust's <stem>-00001.xml ...), plain local paths, or http://example.com/...
URIs, which are mapped onto the directory of the index with a resync Mapper.
The parsed count must equal N and a sample of entries is checked against the
spec above; otherwise the exit status is non-zero.
"""

import argparse
import calendar
import hashlib
import json
import math
import os
import pathlib
import re
import resource as _rusage
import sys
import time

from resync.change_list import ChangeList
from resync.hashes import Hashes
from resync.list_base import ListBase
from resync.mapper import Map, Mapper
from resync.resource import Resource
from resync.resource_list import ResourceList, ResourceListOrdered

KINDS = ("changelist", "resourcelist-index")
BASE_TS = calendar.timegm((2013, 1, 3, 0, 0, 0))  # 2013-01-03T00:00:00Z
BASE_STR = "2013-01-03T00:00:00Z"
UP_HREF = "http://example.com/capabilitylist.xml"
EXAMPLE_BASE = "http://example.com"
CHANGES = ("created", "updated", "deleted")
MAX_PART_ENTRIES = 50000  # resync's ListBaseWithIndex.max_sitemap_entries


def fail(msg):
    print("resync_docbench: error: " + msg, file=sys.stderr)
    sys.exit(1)


def w3c(ts):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def entry(i, kind):
    """Expected values of entry i, as a resync Resource."""
    r = Resource(uri="http://example.com/res/%d" % i,
                 timestamp=BASE_TS + i,
                 md5=hashlib.md5(("res%d" % i).encode("ascii")).hexdigest(),
                 length=1000 + (i % 1000),
                 mime_type="text/html")
    if kind == "changelist":
        r.change = CHANGES[i % 3]
        r.ts_datetime = BASE_TS + i
    return r


def up_link():
    return [{"rel": "up", "href": UP_HREF}]


def file_mapper(directory):
    """Mapper from the directory of PATH to file:// URIs (used when writing).

    dst_to_src matches dst_path as a regular expression, hence re.escape.
    """
    m = Mapper()
    m.mappings.append(Map(pathlib.Path(directory).as_uri(), re.escape(directory)))
    return m


def write_single_part_index(rl, basename):
    """Index + one part for N <= 50,000, where resync's own write() would
    produce a plain sitemap. Same steps and resync calls as the multi-file
    branch of ListBaseWithIndex.write()."""
    s = rl.new_sitemap()
    index_uri = rl.mapper.dst_to_src(basename)
    index = ListBase(md=rl.md.copy(), ln=list(rl.ln))
    index.capability_name = rl.capability_name
    index.default_capability()
    (chunk, nxt) = rl.get_resources_chunk(iter(rl.resources))
    assert nxt is None
    part = rl.part_name(basename, 0)
    uri = rl.mapper.dst_to_src(part)
    with open(part, "w") as f:
        chunk.index = index_uri
        chunk.md = index.md
        s.resources_as_xml(chunk, fh=f)
    index.add(Resource(uri=uri, timestamp=os.stat(part).st_mtime,
                       md5=Hashes(["md5"], part).md5))
    with open(basename, "w") as f:
        s.resources_as_xml(index, sitemapindex=True, fh=f)


def do_write(kind, n, out):
    out = os.path.abspath(out)
    directory = os.path.dirname(out)
    os.makedirs(directory, exist_ok=True)
    if kind == "changelist":
        doc = ChangeList(resources=[entry(i, kind) for i in range(n)],
                         md={"md_from": BASE_STR}, ln=up_link(),
                         mapper=file_mapper(directory))
        doc.max_sitemap_entries = n + 1  # all entries in ONE document
        t0 = time.perf_counter()
        doc.write(basename=out)
        seconds = time.perf_counter() - t0
        files = [out]
    else:
        # Ordered storage keeps entry i at position i (resync's default dict
        # storage would write the entries sorted by URI string).
        doc = ResourceList(resources_class=ResourceListOrdered,
                           md={"md_at": BASE_STR}, ln=up_link(),
                           mapper=file_mapper(directory))
        for i in range(n):
            doc.add(entry(i, kind))
        assert doc.max_sitemap_entries == MAX_PART_ENTRIES
        t0 = time.perf_counter()
        if doc.requires_multifile():
            doc.write(basename=out)
        else:
            write_single_part_index(doc, out)
        seconds = time.perf_counter() - t0
        nparts = max(1, math.ceil(n / MAX_PART_ENTRIES))
        files = [out] + [doc.part_name(out, k) for k in range(nparts)]
    nbytes = sum(os.path.getsize(f) for f in files)
    return seconds, nbytes


def check_resource(got, i, kind):
    want = entry(i, kind)
    atts = ["uri", "timestamp", "md5", "length", "mime_type"]
    if kind == "changelist":
        atts += ["change", "ts_datetime"]
    for a in atts:
        if getattr(got, a) != getattr(want, a):
            fail("entry %d: %s is %r, expected %r"
                 % (i, a, getattr(got, a), getattr(want, a)))


def do_parse(kind, n, path):
    is_uri = re.match(r"\w+:", path) is not None and not os.path.exists(path)
    local = path if not is_uri else None
    if local is not None:
        local = os.path.abspath(local)
    directory = os.path.dirname(local) if local else None
    if kind == "changelist":
        doc = ChangeList()
    else:
        doc = ResourceList()  # resync's default storage, as its client uses
    if directory is not None:
        # only consulted for non-file part URIs in an index read from a file
        # (src_to_dst matches src_uri as a regular expression)
        m = Mapper()
        m.mappings.append(Map(re.escape(EXAMPLE_BASE), directory))
        doc.mapper = m
    t0 = time.perf_counter()
    doc.read(uri=local or path)
    seconds = time.perf_counter() - t0
    count = len(doc)
    if count != n:
        fail("parsed %d entries from %s, expected %d" % (count, path, n))
    if kind == "resourcelist-index" and doc.num_files < 2:
        fail("%s is not a sitemapindex with parts (read %d file)"
             % (path, doc.num_files))
    md = doc.md
    if md.get("capability") != ("changelist" if kind == "changelist" else "resourcelist"):
        fail("unexpected capability %r" % md.get("capability"))
    if doc.up != UP_HREF:
        fail("unexpected up link %r" % doc.up)
    samples = sorted({0, n // 2, n - 1}) if n > 0 else []
    for i in samples:
        if kind == "changelist":
            check_resource(doc.resources[i], i, kind)
        else:
            r = doc.resources.get("http://example.com/res/%d" % i)
            if r is None:
                fail("entry %d missing" % i)
            check_resource(r, i, kind)
    nbytes = doc.bytes_read
    return seconds, nbytes


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="op", required=True)
    for op, dest in (("write", "--out"), ("parse", "--path")):
        sp = sub.add_parser(op)
        sp.add_argument("--kind", required=True, choices=KINDS)
        sp.add_argument("--entries", required=True, type=int)
        sp.add_argument(dest, required=True)
    a = p.parse_args(argv)
    if a.entries < 1:
        p.error("--entries must be >= 1")
    if a.op == "write":
        seconds, nbytes = do_write(a.kind, a.entries, a.out)
    else:
        seconds, nbytes = do_parse(a.kind, a.entries, a.path)
    peak = _rusage.getrusage(_rusage.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"tool": "resync", "op": a.op, "kind": a.kind,
                      "entries": a.entries, "seconds": seconds,
                      "bytes": nbytes, "peak_rss_kib": int(peak)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
