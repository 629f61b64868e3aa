#!/bin/bash
# mid-session GPU check after merging vmm, hostfn, misc, multidev, arrays
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
S=$OUT/summary.txt
tools/gpu-check --build .carry/build --transports shm --logs /tmp/gc > /tmp/gc.out 2>&1
sed -n '/^test | native/,$p' /tmp/gc.out > $S
for f in /tmp/gc/*.log; do if grep -q -E "^FAIL|CUDA error|FAIL:" $f 2>/dev/null; then echo "--- $f" >> $S; grep -E "FAIL|CUDA error|error" $f | head -4 >> $S; fi; done
for sc in restore-after-kill graph-restore; do TERN_TEST_BACKEND=cuda TERN_TEST_TRANSPORT=shm TERN_TEST_KEEP=1 timeout 150 tests/cuda/ckpt-e2e $sc --ternd .carry/build/replayer/ternd --shim-dir .carry/build/guest-shim --prog .carry/build/tests/cuda/ckpt_loop --ckpt .carry/build/cli/ckpt 2>&1 | tail -3 >> $S; done
grep -h -E "moved|error" /tmp/tern-ckpt-*/ternd.log 2>/dev/null | head -5 >> $S
timeout 200 tests/pytorch/compare --build .carry/build --configs mlp,transformer+graphs,cnn+expandable --logs /tmp/pc 2>&1 | tail -5 >> $S
cat $S
