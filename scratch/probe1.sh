#!/bin/bash
# first GPU run of the session
cd "$(dirname "$0")/.."
B=$PWD/build
S=$OUT/summary.txt
exec > >(tee $OUT/all.log) 2>&1
echo "== pending fixes"
tools/gpu-check --build $B --transports shm --only graphs,module_enumerate,cufft_fft,cublas_sgemm 2>&1 | tail -8 | tee -a $S
TERN_TEST_BACKEND=cuda TERN_TEST_TRANSPORT=shm timeout 200 tests/cuda/ckpt-e2e graph-restore --ternd $B/replayer/ternd --shim-dir $B/guest-shim --prog $B/tests/cuda/ckpt_loop --ckpt $B/cli/ckpt 2>&1 | tail -4 | tee -a $S
echo "== probe"
python3 -m pip list 2>/dev/null | grep -i -E "triton|cupy|numba|jax|torch|numpy|nvidia" | tr -s ' ' | tr '\n' ';'; echo
ls -d /usr/local/cuda* 2>/dev/null
NV=$(find / -name "libnvrtc.so.1[0-9]*" -not -path "*/proc/*" 2>/dev/null | head -1); echo "nvrtc: $NV"
mkdir -p /tmp/nvrtc && ln -sf $NV /tmp/nvrtc/libnvrtc.so
HC=$PWD/scratch/hashcat
export LD_LIBRARY_PATH_HC=$HC/lib:/tmp/nvrtc:$(dirname $NV)
H=8743b52063cd84097a65d1633f5c74f5
echo "== hashcat native"
rm -rf $HC/kernels
( export LD_LIBRARY_PATH=$LD_LIBRARY_PATH_HC; timeout 120 $HC/hashcat -m 0 -a 3 --potfile-disable --backend-ignore-opencl --hwmon-disable --quiet $H '?l?l?l?l?l?l?l'; echo "rc=$?" ) 2>&1 | tail -5 | tee -a $S
echo "== hashcat tern"
rm -rf $HC/kernels
TERN_TEST_BACKEND=cuda timeout 200 tests/cuda/with-ternd --ternd $B/replayer/ternd --shim-dir $B/guest-shim --transport shm --no-expect-pass --timeout 180 --lib $HC/lib --lib /tmp/nvrtc --lib $(dirname $NV) -- $HC/hashcat -m 0 -a 3 --potfile-disable --backend-ignore-opencl --hwmon-disable --quiet $H '?l?l?l?l?l?l?l' 2>&1 | tail -30 | tee -a $S
echo "== triton"
python3 -c "import triton; print('triton', triton.__version__)" 2>&1 | tail -1 | tee -a $S
echo "== pytorch restore"
timeout 280 tests/pytorch/restore --build $B --configs mlp,mlp+graphs --logs /tmp/prl 2>&1 | tail -12 | tee -a $S
for f in /tmp/prl/*.ternd.log; do echo "--- $f"; grep -i -E "error|fail|refus" $f | head -10; done
for f in /tmp/prl/*.shim.log; do echo "--- $f"; grep -i -E "error|fail|refus" $f | head -10; done
echo "===== SUMMARY"; cat $S
