#!/usr/bin/python3
"""The dm-multipath device section of docs/linux-initiator.md is the one the kernel-initiator
tests use: its settings equal tests/interop/multipath.conf's without the comments. Exits 1 and
shows both when they differ."""
import os
import re
import sys

here = os.path.dirname(os.path.abspath(__file__))
DOC = "docs/linux-initiator.md"
with open(os.path.join(here, "multipath.conf")) as f:
    conf = [l.strip() for l in f if l.strip() and not l.strip().startswith("#")]
with open(os.path.join(here, "..", "..", DOC)) as f:
    doc = f.read()
blocks = [b for b in re.findall(r"```\n(devices \{.*?)```", doc, re.S)]
if len(blocks) != 1:
    sys.exit(f"{DOC}: expected one multipath devices block, found {len(blocks)}")
shown = [l.strip() for l in blocks[0].splitlines() if l.strip()]
if shown != conf:
    sys.exit(f"{DOC}'s multipath section differs from tests/interop/multipath.conf:\n"
             + "\n".join(shown) + "\n---\n" + "\n".join(conf))
print(f"{DOC} shows tests/interop/multipath.conf ({len(conf)} lines)")
