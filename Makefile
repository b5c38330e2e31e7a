# Two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/gpulease up $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check gpulease tests bench
	$(BIN)/mypy gpulease
	$(BIN)/pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python bench/order_overhead.py
	$(BIN)/python bench/placement_throughput.py
	$(BIN)/python bench/api_latency.py
	$(BIN)/python bench/redfish.py
	$(BIN)/python bench/agent_telemetry.py
	$(BIN)/python bench/invoice_run.py
	$(BIN)/python bench/advise_latency.py

clean:
	rm -rf $(VENV) .gpulease .pytest_cache .mypy_cache .ruff_cache
