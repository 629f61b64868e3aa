#!/usr/bin/env python3
"""Every driver entry point of the shim (a SHIM_API definition) begins with
SHIM_ENTRY(), so that TERN_STATS=2 counts its calls and charges its requests
to it (guest-shim/stats.c). Also checks that the check finds a missing mark.

usage: test_entry_marks.py GUEST_SHIM_DIR
"""
import glob
import os
import re
import sys


def unmarked(text):
    """Names of SHIM_API definitions in @text whose body does not begin with SHIM_ENTRY()."""
    missing = []
    for m in re.finditer(r'^SHIM_API\b[^(]*?(\w+)\s*\(', text, re.M):
        depth, j = 0, m.end() - 1
        while True:
            depth += {'(': 1, ')': -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        body = text[j + 1:].lstrip()
        if body.startswith(';'):
            continue            # a declaration
        if not re.match(r'\{\s*SHIM_ENTRY\(\);', body):
            missing.append(m.group(1))
    return missing


def main():
    if unmarked('SHIM_API CUresult cuFoo(int a)\n{\n\treturn 0;\n}\n') != ['cuFoo']:
        sys.exit('the check does not see a missing mark')
    if unmarked('SHIM_API CUresult cuFoo(int (*f)(void)) { SHIM_ENTRY(); return 0; }\n'):
        sys.exit('the check refuses a marked one-line definition')
    bad, count = [], 0
    for path in sorted(glob.glob(os.path.join(sys.argv[1], '*.c'))):
        text = open(path).read()
        count += len(re.findall(r'^SHIM_API\b', text, re.M))
        bad += [f'{os.path.basename(path)}: {name}' for name in unmarked(text)]
    if bad:
        sys.exit('entry points without SHIM_ENTRY():\n  ' + '\n  '.join(bad))
    if count < 100:
        sys.exit(f'only {count} entry points found: wrong folder?')
    print(f'{count} entry points, every one marked')


main()
