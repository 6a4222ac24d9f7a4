#!/usr/bin/env python3
"""Harvest an OAI-PMH repository with Sickle (0.7.0), as a typical Python harvester does.

The Python side of `rsagg-bench oai` (crates/bench/src/oai.rs), run from the peers' venv
(`scripts/peers.sh install`), one harvest per process so that the bench reads this
harvest's own peak RSS and CPU:

  sickle_harvest.py --url http://127.0.0.1:PORT/oai --out DIR [--prefix oai_dc]

Iterates `Sickle(URL).ListRecords(metadataPrefix=PREFIX)` (Sickle follows the
resumptionTokens; each record is parsed by lxml and turned into Sickle's metadata dict, its
default work) and writes each record's metadata, the element inside `<metadata>` serialised
by lxml with the namespace declarations it needs, to `DIR/<identifier percent-encoded>.xml`.
A deleted record (a header with status="deleted", no metadata) is counted, no file written.

Prints exactly one JSON line on stdout:

  {"tool": "sickle", "records": N, "deleted": D, "files": F, "bytes": B, "seconds": S}

`bytes` is the metadata written (all files); `seconds` the harvest loop alone
(time.perf_counter(), interpreter start and imports excluded; the bench times the whole
process as it times rsagg's).
"""

import argparse
import json
import os
import sys
import time
import urllib.parse

from lxml import etree
from sickle import Sickle

OAI = "{http://www.openarchives.org/OAI/2.0/}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="the repository's base URL")
    ap.add_argument("--out", required=True, help="directory for the records' metadata")
    ap.add_argument("--prefix", default="oai_dc", help="metadataPrefix (default oai_dc)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    start = time.perf_counter()
    records = deleted = files = size = 0
    for record in Sickle(args.url).ListRecords(metadataPrefix=args.prefix):
        records += 1
        if record.deleted:
            deleted += 1
            continue
        metadata = record.xml.find(".//" + OAI + "metadata")
        body = etree.tostring(metadata[0], encoding="UTF-8", with_tail=False)
        name = urllib.parse.quote(record.header.identifier, safe="") + ".xml"
        with open(os.path.join(args.out, name), "wb") as f:
            f.write(body)
        files += 1
        size += len(body)
    seconds = time.perf_counter() - start
    print(json.dumps({"tool": "sickle", "records": records, "deleted": deleted,
                      "files": files, "bytes": size, "seconds": seconds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
