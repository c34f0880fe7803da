#!/usr/bin/env bash
# Prepare HERE everything medic's GPU run needs on the H200 (no network there), in pieces the device tool
# carries: each call sends the checkout it was started in (CARRY_REPO) plus the paths named in `carry`, ≤ 64 MiB.
#
#   bash bench/gpu/prepare.sh               # idempotent; downloads cached under $GPU_CACHE
#   LOOP=server bash bench/gpu/prepare.sh   # the server loop: vLLM's hidden-state server + speculators 0.9.0 client
#   MODEL=DIR … bash bench/gpu/prepare.sh   # another model folder than the lab's tiny Llama (bench/space_arch.py's)
#   VLLM=0.23.0 … bash bench/gpu/prepare.sh # another vLLM CUDA release on the image's torch 2.11 (0.20.x–0.23.x pin it)
#
# It writes $CARRY_REPO/.gpu/ (ignored through that repo's .git/info/exclude, never committed):
#   .gpu/p01 … .gpu/pNN   ≤ 50 MB each: one tar split in pieces (vLLM, its wheels, speculators, medic, the model)
#   .gpu/run/             device_run.sh, summarize.py, the checksum and piece count
# and prints the device calls to make, back to back (README.md beside this file).
#
# What goes: vLLM $VLLM (0.20.2 unless named; torch 2.11 / CUDA 13, as the image's torch) unpacked, without its FA2 extension (FA3
# serves Hopper) as tar.xz; the wheels of its and speculators' needs that the image lacks (bench/gpu/device_has.txt)
# or holds in versions speculators 0.3.0 cannot import with (FORCE); pristine speculators (0.3.0 in process;
# 0.9.0 and hs-connectors 0.9.0 for the server loop, on the image's transformers); medic's wheel from this tree
# and medic's own dependency wheels (its own venv there: vLLM wants another openai); the lab's tiny model and
# checker, with the in-process driver or the server lab's dataset.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TREE=$(cd "$HERE/../.." && pwd)                            # medic's tree: the wheel is built from here
CARRY_REPO=${CARRY_REPO:-/work/main}                       # the checkout the device tool sends
CACHE=${GPU_CACHE:-$HOME/.cache/medic/gpu}
LAB=${LAB:-$HOME/.cache/medic/lab}
PIECE_BYTES=50000000
VLLM=${VLLM:-0.20.2}
LOOP=${LOOP:-inprocess}                                    # inprocess (speculators 0.3.0) | server (0.9.0 client)
SERVER_LAB=${SERVER_LAB:-$HOME/.cache/medic/labs/server-vllm-0.32.0_spec-0.9.0}
MODEL=${MODEL:-$LAB/model-tiny}                            # the job's model: a tiny random one of any architecture
case $LOOP in
inprocess)  # speculators 0.3.0 cannot import with the image's transformers 5.17: carry 4.57 and its hub
    FORCE="transformers==4.57.* huggingface-hub==0.36.* tokenizers==0.22.*"
    PINS=""
    SPEC_NEEDS="loguru pydantic-settings datasets accelerate typer-slim httpx[http2]" ;;  # deepspeed: training only
server)     # speculators ≥ 0.5 wants transformers ≥ 5: the image's 5.17 serves server and client alike
    FORCE=""
    PINS="transformers==5.17.*"                            # resolve against the image's version, carry none
    SPEC_NEEDS="" ;;
*) echo "prepare: LOOP=$LOOP: inprocess or server" >&2; exit 1 ;;
esac
# big GPU kernel libraries this job never imports (other attention backends, FA4's DSL); xgrammar stays: vLLM's
# engine core imports it (a class annotation), as the import tried here in the py312 venv showed; flashinfer-python
# stays too: vLLM 0.23's worker imports it at start (its top-k/top-p sampler asks whether FlashInfer can sample,
# seen on the H100 run of 2026-12-06); its prebuilt kernels (flashinfer-cubin) are left out
SKIP="vllm flashinfer-cubin tilelang nvidia-cutlass-dsl nvidia-cutlass-dsl-libs-base
nvidia-cutlass-dsl-libs-cu12 nvidia-cutlass-dsl-libs-core quack-kernels cuda-tile deepspeed tensorboardx z3-solver
torch-c-dlpack-ext nvidia-cutlass-dsl-libs-cu13 tokenspeed-triton tokenspeed-mla nvidia-nvvm nvidia-cuda-nvcc
nvidia-cuda-tileiras"  # 0.23's MLA (tokenspeed) and CuTe-DSL kernels with their compilers: not a dense model's path
PLATFORM="--only-binary=:all:"

die() { echo "prepare: $*" >&2; exit 1; }

PY312=$(bash "$HERE/find_py312.sh") || exit 1
echo "python 3.12: $PY312"
[ -d "$CARRY_REPO/.git" ] || [ -f "$CARRY_REPO/.git" ] || die "CARRY_REPO=$CARRY_REPO is not a git checkout"
[ -f "$MODEL/config.json" ] || die "no model at $MODEL (medic lab build, or bench/space_arch.py's models)"
mkdir -p "$CACHE"
exclude=$(git -C "$CARRY_REPO" rev-parse --git-path info/exclude)
case $exclude in /*) ;; *) exclude=$CARRY_REPO/$exclude ;; esac
mkdir -p "$(dirname "$exclude")"
grep -qxF /.gpu/ "$exclude" 2>/dev/null || echo /.gpu/ >> "$exclude"

# a cp312 venv with the device's torch: pip resolves vLLM's needs against it (and it lets the import be tried here)
if [ ! -x "$CACHE/py312/bin/python" ] || ! "$CACHE/py312/bin/python" -c 'import torch' 2>/dev/null; then
    "$PY312" -m venv "$CACHE/py312"
    "$CACHE/py312/bin/pip" install -q torch==2.11.0
fi
PIP="$CACHE/py312/bin/pip"

if ! ls "$CACHE"/vllm/vllm-$VLLM-*.whl >/dev/null 2>&1; then
    mkdir -p "$CACHE/vllm"
    "$PIP" download -q --no-deps $PLATFORM -d "$CACHE/vllm" vllm==$VLLM
fi
XZ=$CACHE/vllm-tree-$VLLM.tar.xz
if [ ! -f "$XZ" ]; then
    rm -rf "$CACHE/vllm-tree" && mkdir -p "$CACHE/vllm-tree"
    (cd "$CACHE/vllm-tree" && unzip -q "$CACHE"/vllm/vllm-$VLLM-*.whl \
        && rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so \
        && sed -i '\#vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so#d' vllm-$VLLM.dist-info/RECORD)
    tar -cf - -C "$CACHE/vllm-tree" . | xz -T0 -6 > "$XZ.tmp"
    mv "$XZ.tmp" "$XZ"
fi
# pristine speculators (and, for the server client, the hs-connectors release it pins): a lab's wheel, else PyPI's
case $LOOP in inprocess) clients="speculators==0.3.0" ;; server) clients="speculators==0.9.0 hs-connectors==0.9.0" ;; esac
spec=""
for want in $clients; do
    name=${want%%==*}; file=$(echo "$name" | tr - _)-${want##*==}-py3-none-any.whl
    found=$(ls "$LAB"/../labs/*/wheels/"$file" "$CACHE"/spec/"$file" 2>/dev/null | head -1 || true)
    if [ -z "$found" ]; then
        mkdir -p "$CACHE/spec" && "$PIP" download -q --no-deps -d "$CACHE/spec" "$want"
        found=$(ls "$CACHE"/spec/"$file")
    fi
    spec="$spec $found"
done

# the target's wheels: the resolved closure, less what the image has (unless forced) and the skipped kernels
TW=$CACHE/target-wheels-$LOOP-$VLLM
KEY="$FORCE|$PINS|$SPEC_NEEDS|$SKIP"                      # what the closure was resolved with: a change redoes it
if [ ! -f "$TW/.done" ] || [ "$(cat "$TW/.done")" != "$KEY" ]; then
    # shellcheck disable=SC2086
    "$PIP" install -q --dry-run --only-binary=:all: --report "$TW.json" \
        "$CACHE"/vllm/vllm-$VLLM-*.whl $spec $FORCE $PINS $SPEC_NEEDS torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0
    "$CACHE/py312/bin/python" - "$TW" "$HERE/device_has.txt" "$FORCE" "$SKIP" <<'EOF'
import json, re, sys
tw, has_file, force, skip = sys.argv[1:]
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
has = {norm(w) for line in open(has_file) if not line.startswith("#") for w in line.split()}
forced = {norm(re.split(r"[=<>]", f)[0]) for f in force.split()}
skipped = {norm(w) for w in skip.split()} | {"torch", "torchvision", "torchaudio", "speculators", "hs-connectors"}
report = json.load(open(f"{tw}.json"))
want = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in report["install"]
        if norm(i["metadata"]["name"]) not in skipped
        and (norm(i["metadata"]["name"]) not in has or norm(i["metadata"]["name"]) in forced)]
open(f"{tw}.want", "w").write("\n".join(want) + "\n")
print(f"target wheels: {len(want)}")
EOF
    rm -rf "$TW" && mkdir -p "$TW"
    "$PIP" download -q --no-deps $PLATFORM -d "$TW" -r "$TW.want"
    # shellcheck disable=SC2086
    cp $spec "$TW/"
    printf '%s' "$KEY" > "$TW/.done"
fi

# medic: its wheel from this tree (always fresh) and its own needs for cp312
rm -rf "$CACHE/medic-wheels" && mkdir -p "$CACHE/medic-wheels"
"$PIP" wheel -q --no-deps -w "$CACHE/medic-wheels" "$TREE"
"$PIP" download -q $PLATFORM -d "$CACHE/medic-wheels" "$CACHE"/medic-wheels/medic-*.whl

# the bundle: one tar, split into pieces
B=$CACHE/bundle
rm -rf "$B" && mkdir -p "$B/job" "$B/run"
ln "$XZ" "$B/vllm-tree.tar.xz" 2>/dev/null || cp "$XZ" "$B/vllm-tree.tar.xz"
cp -r "$TW" "$B/target-wheels" && rm -f "$B/target-wheels/.done"
cp -r "$CACHE/medic-wheels" "$B/medic-wheels"
cp -r "$MODEL" "$B/job/model"
echo "$LOOP" > "$B/job/loop"
if [ "$LOOP" = server ]; then  # the client's dataset (rows of the tiny model's tokenizer) and the lab's checker
    [ -d "$SERVER_LAB/data/prepared" ] || die "no server lab dataset at $SERVER_LAB/data/prepared (medic lab build --flavour server)"
    mkdir -p "$B/job/data" && cp -r "$SERVER_LAB/data/prepared" "$B/job/data/prepared"
    cp "$TREE/lab/target/check_server.py" "$B/job/"
else
    cp "$TREE/lab/target/extract.py" "$TREE/lab/target/check.py" "$B/job/"
fi
cp "$HERE/summarize.py" "$HERE/big_model.py" "$B/run/"
(cd "$B" && find . -type f | sort > MANIFEST)
C=$CARRY_REPO/.gpu
rm -rf "$C" && mkdir -p "$C/run" "$C/split"
tar -cf - -C "$B" . | split -b $PIECE_BYTES -d -a 2 - "$C/split/bundle.tar.part-"
parts=$(ls "$C"/split | wc -l)
cat "$C"/split/bundle.tar.part-* | sha256sum | cut -d' ' -f1 > "$C/run/bundle.sha256"
echo "$parts" > "$C/run/bundle.parts"
for f in "$C"/split/bundle.tar.part-*; do
    n=$(printf 'p%02d' $((10#${f##*-} + 1))); mkdir -p "$C/$n"; mv "$f" "$C/$n/"
done
rmdir "$C/split"
cp "$HERE/device_run.sh" "$HERE/summarize.py" "$C/run/"
cp "$C/run/bundle.sha256" "$C/run/bundle.parts" "$C/p01/"
echo "prepared $parts piece(s) in $C ($(du -sh "$C" | cut -f1)); the tree that travels: $(git -C "$CARRY_REPO" ls-files -co --exclude-standard -z | du -ch --files0-from=- 2>/dev/null | tail -1 | cut -f1)"
echo "device calls, back to back (each ≤ 64 MiB):"
for d in "$C"/p*; do
    n=$(basename "$d")
    if [ "$n" = "p$(printf %02d "$parts")" ]; then
        echo "  carry [.gpu/$n, .gpu/run]: bash .gpu/run/device_run.sh go .gpu/$n"
    else
        echo "  carry [.gpu/$n, .gpu/run]: bash .gpu/run/device_run.sh stage .gpu/$n"
    fi
done
echo "  then, if medic is still running: bash .gpu/run/device_run.sh wait (carry nothing)"
