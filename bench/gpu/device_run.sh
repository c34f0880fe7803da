#!/usr/bin/env bash
# medic on the H200, from pristine speculators to verified output. Runs ON THE DEVICE, from the root of the
# checkout the device tool sends, with what bench/gpu/prepare.sh put into .gpu/ (see bench/gpu/README.md).
#
#   bash .gpu/run/device_run.sh stage .gpu/pNN   # carrying call: copy one piece into /tmp (no other work)
#   bash .gpu/run/device_run.sh go               # last carrying call: assemble, install, start medic, wait
#   bash .gpu/run/device_run.sh wait             # a later call: wait on for the same session, then report
#   bash .gpu/run/device_run.sh clean            # after it: one clean launch of the job medic fixed (the unit
#                                                # of the overhead ratio, as bench/cascade.py measures it here)
#
# SHAPE=8b|14b makes the job's model a random-weight Llama of that size on the GPU (bench/gpu/big_model.py, from
# the tiny model's tokenizer) instead of the tiny one; the canary stays tiny (--canary-model).
#
# /tmp survives only while the machine stays warm (30 s between calls), so the calls go back to back. medic runs
# in its own process session, so a call that ends before it does leaves it running for the next `wait`.
# What comes back ($OUT): summary.md, the trace, the postmortem, the replay, medic's console log, setup log.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 TOKENIZERS_PARALLELISM=false
G=/tmp/g                                  # everything carried and built, outside any repository
JOB=/tmp/job                              # the user's job folder: driver and model, relative paths
BASE_PY=${BASE_PY:-/opt/torch/.venv/bin/python3}
BASE_SITE=${BASE_SITE:-/opt/torch/.venv/lib/python3.12/site-packages}
TP=${TP:-1}                               # GPUs one model spans (tensor parallel); 2 on nvidia-h200-x2
SHAPE=${SHAPE:-}                          # empty: the tiny model; 8b | 14b: a real size, made on the device
WAIT_S=${WAIT_S:-540}                     # how long one call waits for medic (a call may run 600 s)
OUT=${OUT:-$G/out}
SESSION_FILE=$G/session
mkdir -p "$G" "$OUT"
T0=$(date +%s)

die() { echo "device_run: $*" >&2; exit 1; }
site_of() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

stage() {
    [ -d "${1:-}" ] || die "no piece folder: ${1:-}"
    mkdir -p "$G/pieces" && cp "$1"/* "$G/pieces/" || die "copy failed"
    echo "staged $(ls "$G/pieces" | wc -l) piece(s), $(du -sh "$G/pieces" | cut -f1) in $G/pieces"
}

assemble() {
    [ -f "$G/bundle/MANIFEST" ] && return 0
    local want; want=$(cat "$G/pieces/bundle.sha256" 2>/dev/null) || die "bundle.sha256 not staged"
    local n; n=$(ls "$G"/pieces/bundle.tar.part-* 2>/dev/null | wc -l)
    [ "$n" -eq "$(cat "$G/pieces/bundle.parts")" ] || die "$n of $(cat "$G/pieces/bundle.parts") pieces staged"
    cat "$G"/pieces/bundle.tar.part-* > "$G/bundle.tar"
    [ "$(sha256sum "$G/bundle.tar" | cut -d' ' -f1)" = "$want" ] || die "bundle checksum differs"
    mkdir -p "$G/bundle" && tar -xf "$G/bundle.tar" -C "$G/bundle" && rm -f "$G/bundle.tar" "$G"/pieces/bundle.tar.part-*
    [ -f "$G/bundle/MANIFEST" ] || die "bundle has no MANIFEST"
}

install_envs() {
    [ -x "$G/mvenv/bin/medic" ] && return 0
    local b=$G/bundle
    # the target env: the image's torch (a .pth to its site-packages; --system-site-packages cannot see it,
    # the base is itself a venv), then vLLM, speculators and the pins the image has in other versions
    "$BASE_PY" -m venv --without-pip "$G/tvenv" || die "target venv"
    local tsite; tsite=$(site_of "$G/tvenv/bin/python")
    echo "$BASE_SITE" > "$tsite/zz-opt-torch.pth"
    "$BASE_PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$tsite" \
        "$b"/target-wheels/*.whl || die "target wheels"
    tar -xJf "$b/vllm-tree.tar.xz" -C "$tsite" || die "vllm tree"
    # medic's own env: openai, pydantic, langgraph in medic's versions, nothing of the target's
    "$BASE_PY" -m venv --without-pip "$G/mvenv" || die "medic venv"
    local msite; msite=$(site_of "$G/mvenv/bin/python")
    "$BASE_PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$msite" \
        "$b"/medic-wheels/*.whl || die "medic wheels"
    printf '#!%s\nimport sys\nfrom agent.cli.main import main\nsys.exit(main())\n' "$G/mvenv/bin/python" > "$G/mvenv/bin/medic"
    chmod +x "$G/mvenv/bin/medic"
}

probe() {
    LOOP=$(loop) "$G/tvenv/bin/python" - <<'EOF' 2>&1 | tail -20
import importlib.metadata as md, os, torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
for name in ("vllm", "speculators", "hs-connectors", "transformers", "huggingface-hub", "tokenizers", "pydantic", "numpy", "numba"):
    try: print(name, md.version(name))
    except Exception as exc: print(name, "missing", exc)
import vllm, speculators  # noqa: F401
if os.environ["LOOP"] == "server":
    import speculators.cli.generate_offline_data  # noqa: F401  the client's imports
    import vllm.entrypoints.openai.api_server  # noqa: F401  the server's
else:
    import speculators.data_generation.vllm_hidden_states_generator  # noqa: F401  the driver's imports
print("imports ok")
EOF
    "$G/mvenv/bin/medic" --help >/dev/null && echo "medic ok: $("$G/mvenv/bin/python" -c 'import importlib.metadata as m; print(m.version("medic"))')"
}

loop() { cat "$G/bundle/job/loop" 2>/dev/null || echo inprocess; }

# the user's job, as a stranger types it: in the job folder, relative paths, medic's own validation (no
# --validate), unattended. In process: the lab's driver, the canary on a tiny model of the job's architecture.
# Server loop: the README's server example — vLLM's hidden-state server (speculators' default layer ids for 8
# layers, as its launch_vllm.py picks them) and the speculators CLI, both the target env's, the venv not activated.
job_command() {  # prints the command line, each word shell-quoted; words after the session are medic's flags
    local medic=$1 session=$2 words
    shift 2
    words=("$medic" run --session "$session" --python "$G/tvenv/bin/python" --workdir . --max-launches 6 --max-wall 1500 "$@")
    if [ "$(loop)" = server ]; then
        local spec='{"method":"extract_hidden_states","num_speculative_tokens":1,"draft_model_config":{"hf_config":{"eagle_aux_hidden_state_layer_ids":[2,4,5,8]}}}'
        local kv='{"kv_connector":"ExampleHiddenStatesConnector","kv_role":"kv_producer","kv_connector_extra_config":{"shared_storage_path":"staging"}}'
        words+=(--server "python -m vllm.entrypoints.cli.main serve model --speculative_config '$spec' --kv_transfer_config '$kv' --host 127.0.0.1 --port {port} --max-model-len 512"
                -- speculators generate-offline-data --endpoint "http://127.0.0.1:{port}/v1" --model model
                --preprocessed-data data/prepared --output hs --concurrency 2)
    else
        words+=(--canary-model model -- python extract.py --model model --out hidden_states.pt)
    fi
    printf '%q ' "${words[@]}"
}

start_medic() {
    [ -f "$SESSION_FILE" ] && return 0
    rm -rf "$JOB" && mkdir -p "$JOB"
    if [ -n "$SHAPE" ]; then
        "$G/tvenv/bin/python" "$G/bundle/run/big_model.py" "$G/bundle/job/model" "$JOB/model" "$SHAPE" \
            || die "could not make the $SHAPE model"
    else
        cp -r "$G/bundle/job/model" "$JOB/model"
    fi
    if [ "$(loop)" = server ]; then cp -r "$G/bundle/job/data" "$JOB/data"; else cp "$G/bundle/job/extract.py" "$JOB/"; fi
    if [ "$TP" -gt 1 ]; then  # the user's driver asks speculators' generator for TP ranks (its own keyword)
        sed -i "s/max_model_len=256)/max_model_len=256, tensor_parallel_size=$TP)/" "$JOB/extract.py"
        grep -q "tensor_parallel_size=$TP" "$JOB/extract.py" || die "could not set tensor_parallel_size in the driver"
    fi
    local session; session=gpu-$(date -u +%Y%m%d-%H%M%S)
    echo "$session" > "$SESSION_FILE"
    date +%s > "$G/medic.t0"
    { echo "cd '$JOB'"; echo "$(job_command "$G/mvenv/bin/medic" "$session") > '$G/medic.log' 2>&1"
      echo "echo \$? > '$G/medic.rc'"; } > "$G/job.sh"
    ( setsid bash "$G/job.sh" < /dev/null > /dev/null 2>&1 & )
    echo "started medic session $session in $JOB:"; tail -n +2 "$G/job.sh" | head -1
}

wait_medic() {
    local until=$((T0 + WAIT_S))
    while [ ! -f "$G/medic.rc" ] && [ "$(date +%s)" -lt "$until" ]; do sleep 3; done
    cp "$G/medic.log" "$OUT/medic.log" 2>/dev/null
    if [ ! -f "$G/medic.rc" ]; then
        echo "medic still running after $(( $(date +%s) - $(cat "$G/medic.t0") )) s; call 'wait' again"
        tail -5 "$G/medic.log"; return 1
    fi
    return 0
}

report() {
    local session rc wall trace
    session=$(cat "$SESSION_FILE"); rc=$(cat "$G/medic.rc"); wall=$(( $(stat -c %Y "$G/medic.rc") - $(cat "$G/medic.t0") ))
    trace=$JOB/traces/$session.jsonl
    cp "$trace" "$OUT/" 2>/dev/null
    ( cd "$JOB" && "$G/mvenv/bin/medic" postmortem "traces/$session.jsonl" ) > "$OUT/postmortem.txt" 2>&1
    ( cd "$JOB" && "$G/mvenv/bin/medic" replay "traces/$session.jsonl" ) > "$OUT/replay.txt" 2>&1; echo "replay exit $?" >> "$OUT/replay.txt"
    if [ "$(loop)" = server ]; then
        ( cd "$JOB" && "$G/tvenv/bin/python" "$G/bundle/job/check_server.py" hs --model model --dataset data/prepared \
            --layers 2,4,5,8 ) > "$OUT/check.txt" 2>&1
    else
        ( cd "$JOB" && "$G/tvenv/bin/python" "$G/bundle/job/check.py" hidden_states.pt --model model ) > "$OUT/check.txt" 2>&1
    fi
    echo "check.py exit $?" >> "$OUT/check.txt"
    "$G/mvenv/bin/python" "$G/bundle/run/summarize.py" "$trace" --exit "$rc" --wall "$wall" \
        --log "$G/medic.log" --probe "$OUT/setup.log" > "$OUT/summary.md" 2>&1
    # every launch's log (server and client runs), for what the summary does not say
    ( cd "$JOB" && find .medic -path '*/runs/*' -name log -print0 | tar -czf "$OUT/run-logs.tar.gz" --null -T - ) 2>/dev/null
    cat "$OUT/summary.md"; tail -3 "$OUT/check.txt"
}

clean() {  # the unit of the ratio: the fixed job launched once, with medic's own check, nothing else
    [ -f "$G/medic.rc" ] || die "no finished medic session in $G to measure against"
    local session t0 t1 rc
    session=clean-$(date -u +%Y%m%d-%H%M%S)
    # the job as medic left it: its files patched, and the environment its launches ran with (an env remedy is the
    # session's, set for medic's launches: a person's own run sets it as the report says)
    local flags=(--no-scan --no-canary) kv
    while read -r kv; do [ -n "$kv" ] && flags+=(--env "$kv"); done < <(python3 - "$JOB/traces/$(cat "$SESSION_FILE").jsonl" <<'EOF'
import json, sys
for line in open(sys.argv[1]).read().splitlines()[1:]:
    event = json.loads(line)
    if event["kind"] == "applied":
        print("\n".join(event["data"].get("env") or []))
EOF
)
    t0=$(date +%s.%N)
    ( cd "$JOB" && eval "$(job_command "$G/mvenv/bin/medic" "$session" "${flags[@]}")" ) > "$OUT/clean.log" 2>&1
    rc=$?; t1=$(date +%s.%N)
    cp "$JOB/traces/$session.jsonl" "$OUT/" 2>/dev/null
    local wall; wall=$(( $(stat -c %Y "$G/medic.rc") - $(cat "$G/medic.t0") ))
    python3 -c "import sys; c=float(sys.argv[2])-float(sys.argv[1]); s=float(sys.argv[3]); print(f'clean launch {c:.1f} s (exit {sys.argv[4]}); medic session {s:.0f} s; wall_ratio={s/c:.2f}')" \
        "$t0" "$t1" "$wall" "$rc" | tee "$OUT/overhead.txt"
    tail -3 "$OUT/clean.log"
}

case "${1:-}" in
    stage) stage "${2:-}" ;;
    go)
        nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
        [ -n "${2:-}" ] && stage "$2"
        { assemble && install_envs && probe; } > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; die "setup failed"; }
        cat "$OUT/setup.log"; echo "setup took $(( $(date +%s) - T0 )) s"
        grep -q "imports ok" "$OUT/setup.log" || die "the target env cannot import the driver's modules"
        start_medic && wait_medic && report ;;
    wait) wait_medic && report ;;
    clean) clean ;;
    *) die "usage: device_run.sh stage DIR | go [DIR] | wait | clean" ;;
esac
