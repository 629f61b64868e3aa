#!/usr/bin/env python3
"""tools/check-layers refuses what climbs and passes what does not, on small
trees made here: an include of a part above, of a header no part owns, a
path that climbs with ../, and the allowed direction."""
import os
import subprocess
import sys
import tempfile

checker = sys.argv[1]


def tree(files):
    root = tempfile.mkdtemp(prefix="tern-layers-")
    for rel, text in files.items():
        os.makedirs(os.path.join(root, os.path.dirname(rel)), exist_ok=True)
        with open(os.path.join(root, rel), "w") as fh:
            fh.write(text)
    return root


def run(files):
    r = subprocess.run([checker, tree(files)], capture_output=True, text=True)
    return r.returncode, r.stderr


base = {
    "common/log.h": "",
    "replayer/backend/backend.h": '#include "log.h"\n',
    "replayer/exec/exec.h": '#include "backend.h"\n',
    "replayer/daemon/worker.h": '#include "exec.h"\n',
}
failures = 0


def expect(name, files, rc, text=""):
    global failures
    got, err = run({**base, **files})
    if got != rc or text not in err:
        print(f"FAIL {name}: rc {got} (want {rc}), stderr {err!r}")
        failures += 1
    else:
        print(f"ok   {name}")


expect("downward includes pass", {}, 0)
expect("exec including the daemon", {"replayer/exec/exec.c": '#include "worker.h"\n'}, 1,
       'replayer/exec may not include "worker.h" of replayer/daemon')
expect("backend including exec", {"replayer/backend/cuda.c": '#include "exec.h"\n'}, 1,
       "replayer/backend may not include")
expect("a climbing path", {"replayer/exec/x.c": '#include "../daemon/worker.h"\n'}, 1,
       "replayer/exec may not include")
expect("a header nobody owns", {"common/wire.c": '#include "mystery.h"\n'}, 1,
       "belongs to no part")
expect("common including anything", {"common/wire.c": '#include "backend.h"\n'}, 1,
       "common may not include")
print(f"{6 - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
