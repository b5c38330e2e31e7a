# Two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The suite on each core (at most 4): tests that share one outside resource run on one
# worker (tests/conftest.py, pytest_collection_modifyitems).
PYTEST_ARGS ?= -n auto --maxprocesses=4 --dist loadgroup
# The API docs' and the console's browser assets (Swagger UI, Redoc, ECharts' common
# build; axe-core, which the browser tests run on every page), from the npm registry at
# build time (nothing from a CDN at run time); shipped
# in the package, not kept in git.
VENDOR := gpulease/web/vendor
SWAGGER_UI := swagger-ui-dist@5.35.0
REDOC := redoc@2.5.4
ECHARTS := echarts@5.6.0
AXE := axe-core@4.14.1

.PHONY: run test lint bench clean vendor messages

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@# the lab (`gpulease lab`) where libvirt's headers are installed (.ci/run installs them)
	if pkg-config --exists libvirt 2>/dev/null; then $(BIN)/pip install --quiet -e '.[lab]'; fi
	touch $(STAMP)

$(VENDOR)/.fetched: Makefile
	@if ! command -v npm >/dev/null; then \
	  echo "npm not found: the API docs and the console's charts will ask for 'make vendor'"; \
	else \
	  rm -rf $(VENDOR) && mkdir -p $(VENDOR)/npm $(VENDOR)/swagger-ui $(VENDOR)/redoc \
	    $(VENDOR)/echarts $(VENDOR)/axe-core && \
	  npm pack --silent --pack-destination $(VENDOR)/npm $(SWAGGER_UI) $(REDOC) $(ECHARTS) \
	    $(AXE) >/dev/null && \
	  tar -xzf $(VENDOR)/npm/swagger-ui-dist-*.tgz -C $(VENDOR)/swagger-ui \
	    --strip-components=1 package/swagger-ui-bundle.js package/swagger-ui.css \
	    package/LICENSE && \
	  tar -xzf $(VENDOR)/npm/redoc-*.tgz -C $(VENDOR)/redoc --strip-components=2 \
	    package/bundles/redoc.standalone.js && \
	  tar -xzf $(VENDOR)/npm/redoc-*.tgz -C $(VENDOR)/redoc --strip-components=1 \
	    package/LICENSE && \
	  tar -xzf $(VENDOR)/npm/echarts-*.tgz -C $(VENDOR)/echarts --strip-components=2 \
	    package/dist/echarts.common.min.js && \
	  tar -xzf $(VENDOR)/npm/echarts-*.tgz -C $(VENDOR)/echarts --strip-components=1 \
	    package/LICENSE && \
	  tar -xzf $(VENDOR)/npm/axe-core-*.tgz -C $(VENDOR)/axe-core --strip-components=1 \
	    package/axe.min.js package/LICENSE && \
	  rm -rf $(VENDOR)/npm && touch $@; \
	fi

vendor: $(VENDOR)/.fetched

run: $(STAMP) $(VENDOR)/.fetched
	$(BIN)/gpulease up $(ARGS)

test: $(STAMP) $(VENDOR)/.fetched
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
	$(BIN)/python bench/console_pages.py
	$(BIN)/python bench/list_threads.py

# The console's messages: extract them from the templates and code, then merge them into
# each language's catalog (gpulease/locale/<lang>/LC_MESSAGES/console.po) for translating;
# the CLI's --help texts likewise (cli_help.pot from the command tree, cli_help.po).
# gettext's markers, the phrases, and the errors whose sentence is a message (the field
# comes first in InvalidInput, PricingError and SizingError).
MESSAGE_KEYWORDS := -k _ -k N_ -k phrase $(foreach e,DomainError NotFound Forbidden \
  Unauthorized Conflict OutOfStock QuotaExceeded BudgetExceeded BadGateway TooManyRequests \
  Unavailable Gone PaymentRequired,-k $(e)) \
  $(foreach e,InvalidInput PricingError SizingError,-k $(e):2)

messages: $(STAMP)
	$(BIN)/pybabel extract -F babel.cfg $(MESSAGE_KEYWORDS) --no-location --omit-header \
	  --sort-output -o gpulease/locale/console.pot .
	$(BIN)/pybabel update -i gpulease/locale/console.pot -d gpulease/locale -D console \
	  --width 100 --no-fuzzy-matching --ignore-obsolete
	$(BIN)/python -m gpulease.cli.help_template > gpulease/locale/cli_help.pot
	$(BIN)/pybabel update -i gpulease/locale/cli_help.pot -d gpulease/locale -D cli_help \
	  --width 100 --no-fuzzy-matching --ignore-obsolete

clean:
	rm -rf $(VENV) $(VENDOR) .gpulease .pytest_cache .mypy_cache .ruff_cache
