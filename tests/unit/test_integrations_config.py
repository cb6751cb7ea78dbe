"""The INTEGRATIONS_FILE catalog: the documented example loads; every mistake names its key."""

import re
from pathlib import Path

import pytest

from actions.base import IntegrationConfigError
from actions.catalog import load_catalog, parse_catalog
from actions.registry import ADAPTERS, SIMULATION_KEYS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "integrations.toml"
LEASE = 60  # seconds
ENV = {"PAYMENTS_AUTH": "Bearer example-token"}

CONTRACT = '[contracts."p.x@1"]\neffect = "NON_IDEMPOTENT_WRITE"\n'
ROUTE = '[routes."p.x@1"]\nadapter = "http.json"\nurl = "http://127.0.0.1:9000/x"\n'


def load(tmp_path, text: str, environ=None, lease: float = LEASE):
    path = tmp_path / "integrations.toml"
    path.write_text(text)
    return load_catalog(
        path,
        adapters=ADAPTERS,
        lease_seconds=lease,
        environ=ENV if environ is None else environ,
        reserved=SIMULATION_KEYS,
    )


def error_of(tmp_path, text: str, **kwargs) -> IntegrationConfigError:
    with pytest.raises(IntegrationConfigError) as caught:
        load(tmp_path, text, **kwargs)
    return caught.value


# ------------------------------------------------------------------------------
# What loads
# ------------------------------------------------------------------------------
def test_catalog__no_file__empty():
    catalog = load_catalog(None, adapters=ADAPTERS, lease_seconds=LEASE, environ={})

    assert catalog.contracts == {}
    assert catalog.routes == {}


def test_catalog__example_file__loads_every_capability():
    catalog = load_catalog(EXAMPLE, adapters=ADAPTERS, lease_seconds=LEASE, environ=ENV)

    assert set(catalog.routes) == {
        "documents.verify@1",
        "payments.charge@1",
        "payments.refund@1",
        "stock.reserve@1",
        "stock.release@1",
    }
    charge = catalog.contracts["payments.charge@1"]
    assert (charge.effect, charge.max_attempts, charge.timeout_seconds) == (
        "NON_IDEMPOTENT_WRITE",
        3,
        5.0,
    )
    assert catalog.contracts["stock.reserve@1"].effect == "IDEMPOTENT_WRITE"
    route = catalog.routes["payments.charge@1"].options
    assert route["headers_from_env"] == {"Authorization": "PAYMENTS_AUTH"}
    assert route["max_response_bytes"] == 64 * 1024
    assert catalog.routes["payments.refund@1"].options["max_response_bytes"] == 1024 * 1024
    assert "example-token" not in repr(catalog)
    # Every route goes to the sandbox provider's port, which scripts/start rewrites as a whole.
    for name, route in catalog.routes.items():
        for option in ("url", "lookup_url"):
            if option in route.options:
                assert route.options[option].startswith("http://127.0.0.1:9000/"), name


def test_catalog__example_in_integrations_md_is_the_example_file():
    doc = (ROOT / "INTEGRATIONS.md").read_text()
    block = re.search(r"```toml\n(.*?)```", doc, re.S)

    assert block is not None
    assert block.group(1) == EXAMPLE.read_text()


def test_catalog__defaults(tmp_path):
    catalog = load(tmp_path, CONTRACT + ROUTE)

    contract = catalog.contracts["p.x@1"]
    assert (contract.max_attempts, contract.timeout_seconds) == (3, 10.0)
    assert contract.input_schema == contract.output_schema == {"type": "object"}
    assert catalog.routes["p.x@1"].options["method"] == "POST"


def test_catalog__default_timeout_fits_a_short_lease(tmp_path):
    catalog = load(tmp_path, CONTRACT + ROUTE, lease=8)

    assert catalog.contracts["p.x@1"].timeout_seconds == 4.0


def test_catalog__documents_verify_schemas_come_from_the_adapter(tmp_path):
    text = (
        '[contracts."documents.verify@1"]\neffect = "READ_ONLY"\n'
        'input_schema = { type = "object", required = ["documentId", "sha256", "kind"] }\n'
        '[routes."documents.verify@1"]\nadapter = "documents.verify"\n'
        'url = "http://127.0.0.1:9100/documents/{documentId}"\n'
        'allowed_media_types = ["Application/PDF"]\n'
    )

    catalog = load(tmp_path, text)

    contract = catalog.contracts["documents.verify@1"]
    assert contract.input_schema["allOf"][0] is ADAPTERS["documents.verify"].input_schema
    assert contract.output_schema is ADAPTERS["documents.verify"].output_schema
    assert catalog.routes["documents.verify@1"].options["allowed_media_types"] == (
        "application/pdf",
    )


# ------------------------------------------------------------------------------
# What is refused, naming the key
# ------------------------------------------------------------------------------
CASES = [
    # (name, file text, key named, words of the reason)
    ("unknown top-level key", "[contract]\n", "contract", "unknown key"),
    ("contracts not a table", "contracts = 1\n", "contracts", "must be a table"),
    (
        "unknown contract key",
        CONTRACT + "retries = 2\n" + ROUTE,
        'contracts."p.x@1".retries',
        "unknown key",
    ),
    (
        "unknown route key",
        CONTRACT + ROUTE + "timeout = 3\n",
        'routes."p.x@1".timeout',
        "unknown key",
    ),
    (
        "missing effect",
        '[contracts."p.x@1"]\nmax_attempts = 2\n' + ROUTE,
        'contracts."p.x@1".effect',
        "required",
    ),
    (
        "bad effect",
        '[contracts."p.x@1"]\neffect = "WRITE"\n' + ROUTE,
        'contracts."p.x@1".effect',
        "must be one of",
    ),
    (
        "max_attempts a boolean",
        CONTRACT + "max_attempts = true\n" + ROUTE,
        'contracts."p.x@1".max_attempts',
        "integer",
    ),
    (
        "max_attempts zero",
        CONTRACT + "max_attempts = 0\n" + ROUTE,
        'contracts."p.x@1".max_attempts',
        "between 1 and 100",
    ),
    (
        "timeout not under the lease",
        CONTRACT + "timeout_seconds = 45\n" + ROUTE,
        'contracts."p.x@1".timeout_seconds',
        "WORKER_LEASE_SECONDS",
    ),
    (
        "timeout not positive",
        CONTRACT + "timeout_seconds = 0\n" + ROUTE,
        'contracts."p.x@1".timeout_seconds',
        "more than 0",
    ),
    (
        "timeout a string",
        CONTRACT + 'timeout_seconds = "5"\n' + ROUTE,
        'contracts."p.x@1".timeout_seconds',
        "number of seconds",
    ),
    (
        "invalid input schema",
        CONTRACT + 'input_schema = { type = "objekt" }\n' + ROUTE,
        'contracts."p.x@1".input_schema',
        "not a valid JSON Schema",
    ),
    (
        "output schema not a table",
        CONTRACT + 'output_schema = "object"\n' + ROUTE,
        'contracts."p.x@1".output_schema',
        "must be a table",
    ),
    (
        "TOML date in a schema",
        CONTRACT + "output_schema = { const = 2024-01-01 }\n" + ROUTE,
        'contracts."p.x@1".output_schema',
        "not JSON",
    ),
    ("route without contract", ROUTE, 'routes."p.x@1"', "has no contract"),
    ("contract without route", CONTRACT, 'contracts."p.x@1"', "has no route"),
    (
        "bad name",
        '[contracts."payments"]\neffect = "READ_ONLY"\n',
        'contracts."payments"',
        "capability@version",
    ),
    (
        "version zero",
        '[contracts."p.x@0"]\neffect = "READ_ONLY"\n',
        'contracts."p.x@0"',
        "capability@version",
    ),
    (
        "simulation capability",
        '[contracts."NO_OP@1"]\neffect = "READ_ONLY"\n',
        'contracts."NO_OP@1"',
        "simulation",
    ),
    (
        "missing adapter",
        CONTRACT + '[routes."p.x@1"]\nurl = "http://127.0.0.1/x"\n',
        'routes."p.x@1".adapter',
        "required",
    ),
    (
        "unknown adapter",
        CONTRACT + '[routes."p.x@1"]\nadapter = "simulation.noop"\n',
        'routes."p.x@1".adapter',
        "must be one of documents.verify, http.json",
    ),
    (
        "missing url",
        CONTRACT + '[routes."p.x@1"]\nadapter = "http.json"\n',
        'routes."p.x@1".url',
        "required",
    ),
    (
        "non-http url",
        CONTRACT + '[routes."p.x@1"]\nadapter = "http.json"\nurl = "ftp://127.0.0.1/x"\n',
        'routes."p.x@1".url',
        "http:// or https://",
    ),
    (
        "url with credentials",
        CONTRACT + '[routes."p.x@1"]\nadapter = "http.json"\nurl = "http://u:p@127.0.0.1/x"\n',
        'routes."p.x@1".url',
        "credentials",
    ),
    (
        "url with a placeholder",
        CONTRACT + '[routes."p.x@1"]\nadapter = "http.json"\nurl = "http://127.0.0.1/{id}"\n',
        'routes."p.x@1".url',
        "unknown placeholder {id}",
    ),
    (
        "url without host",
        CONTRACT + '[routes."p.x@1"]\nadapter = "http.json"\nurl = "http:///x"\n',
        'routes."p.x@1".url',
        "host",
    ),
    (
        "bad method",
        CONTRACT + ROUTE + 'method = "DELETE"\n',
        'routes."p.x@1".method',
        "POST, PUT, PATCH",
    ),
    (
        "lookup_url without {key}",
        CONTRACT + ROUTE + 'lookup_url = "http://127.0.0.1:9000/x/by-key"\n',
        'routes."p.x@1".lookup_url',
        "{key} exactly once",
    ),
    (
        "lookup_url with {key} in the host",
        CONTRACT + ROUTE + 'lookup_url = "http://{key}.example/x"\n',
        'routes."p.x@1".lookup_url',
        "host and port must be fixed",
    ),
    (
        "max_response_bytes too large",
        CONTRACT + ROUTE + "max_response_bytes = 1073741824\n",
        'routes."p.x@1".max_response_bytes',
        "between",
    ),
    (
        "credential not set",
        CONTRACT + ROUTE + 'headers_from_env = { Authorization = "NOT_SET_AUTH" }\n',
        'routes."p.x@1".headers_from_env.Authorization',
        "NOT_SET_AUTH is not set",
    ),
    (
        "credential written in the file",
        CONTRACT + ROUTE + 'headers_from_env = { Authorization = "Bearer abc" }\n',
        'routes."p.x@1".headers_from_env.Authorization',
        "name of an environment variable",
    ),
    (
        "reserved header",
        CONTRACT + ROUTE + 'headers_from_env = { Idempotency-Key = "PAYMENTS_AUTH" }\n',
        'routes."p.x@1".headers_from_env.Idempotency-Key',
        "set by the adapter",
    ),
    (
        "documents.verify with another effect",
        '[contracts."documents.verify@1"]\neffect = "IDEMPOTENT_WRITE"\n'
        '[routes."documents.verify@1"]\nadapter = "documents.verify"\n'
        'url = "http://127.0.0.1:9100/documents/{documentId}"\n',
        'contracts."documents.verify@1".effect',
        "always has effect READ_ONLY",
    ),
    (
        "documents.verify url without {documentId}",
        '[contracts."documents.verify@1"]\neffect = "READ_ONLY"\n'
        '[routes."documents.verify@1"]\nadapter = "documents.verify"\n'
        'url = "http://127.0.0.1:9100/documents"\n',
        'routes."documents.verify@1".url',
        "{documentId} exactly once",
    ),
    (
        "documents.verify with a lookup_url",
        '[contracts."documents.verify@1"]\neffect = "READ_ONLY"\n'
        '[routes."documents.verify@1"]\nadapter = "documents.verify"\n'
        'url = "http://127.0.0.1:9100/documents/{documentId}"\n'
        'lookup_url = "http://127.0.0.1:9100/{key}"\n',
        'routes."documents.verify@1".lookup_url',
        "unknown key",
    ),
    (
        "bad media type",
        '[contracts."documents.verify@1"]\neffect = "READ_ONLY"\n'
        '[routes."documents.verify@1"]\nadapter = "documents.verify"\n'
        'url = "http://127.0.0.1:9100/documents/{documentId}"\n'
        'allowed_media_types = ["pdf"]\n',
        'routes."documents.verify@1".allowed_media_types',
        "not a valid media type",
    ),
    ("not TOML", "[contracts\n", "INTEGRATIONS_FILE", "not valid TOML"),
    (
        "input schema pattern with a lookahead",
        CONTRACT
        + "input_schema = { type = \"object\", properties = { code = { pattern = '^(?=x)' } } }\n"
        + ROUTE,
        'contracts."p.x@1".input_schema',
        "unsupported pattern at $.properties.code.pattern",
    ),
    (
        "output schema patternProperties with a backreference",
        CONTRACT + "output_schema = { patternProperties = { '(a)\\1' = {} } }\n" + ROUTE,
        'contracts."p.x@1".output_schema',
        "linear-time engine (RE2)",
    ),
]


@pytest.mark.parametrize(
    ("text", "key", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_catalog__refused__names_the_key(tmp_path, text, key, reason):
    error = error_of(tmp_path, text)

    assert error.key == key
    assert reason in error.reason
    assert str(error).startswith(f"{key}: ")


def test_catalog__credential_with_a_line_break__refused_without_showing_it(tmp_path):
    text = CONTRACT + ROUTE + 'headers_from_env = { Authorization = "PAYMENTS_AUTH" }\n'

    error = error_of(tmp_path, text, environ={"PAYMENTS_AUTH": "Bearer top\r\nX-Evil: 1"})

    assert error.key == 'routes."p.x@1".headers_from_env.Authorization'
    assert "top" not in str(error)


def test_catalog__unreadable_file__names_the_setting(tmp_path):
    with pytest.raises(IntegrationConfigError) as caught:
        load_catalog(tmp_path / "missing.toml", adapters=ADAPTERS, lease_seconds=LEASE)

    assert caught.value.key == "INTEGRATIONS_FILE"
    assert "cannot read" in caught.value.reason


def test_parse_catalog__takes_an_already_parsed_document():
    document = {
        "contracts": {"p.x@1": {"effect": "READ_ONLY"}},
        "routes": {"p.x@1": {"adapter": "http.json", "url": "https://provider.example/x"}},
    }

    catalog = parse_catalog(document, adapters=ADAPTERS, lease_seconds=LEASE, environ={})

    assert catalog.routes["p.x@1"].options["url"] == "https://provider.example/x"


# ------------------------------------------------------------------------------
# Asynchronous routes, callback timeouts and the principal header
# ------------------------------------------------------------------------------
SECRET_ENV = {**ENV, "CALLBACK_SECRET": "s" * 32}


def test_async_route__loads_with_its_secret_variable_and_callback_timeout(tmp_path):
    catalog = load(
        tmp_path,
        CONTRACT
        + "callback_timeout_seconds = 7200\n"
        + ROUTE
        + 'async = true\ncallback_secret_from_env = "CALLBACK_SECRET"\n'
        + 'principal_header = "X-On-Behalf-Of"\n',
        environ=SECRET_ENV,
    )
    route = catalog.routes["p.x@1"]
    assert route.is_async
    assert route.options["callback_secret_from_env"] == "CALLBACK_SECRET"
    assert route.options["principal_header"] == "X-On-Behalf-Of"
    assert catalog.contracts["p.x@1"].callback_timeout_seconds == 7200
    assert "s" * 32 not in repr(catalog)  # the secret's value never enters the catalog


def test_sync_route__is_not_async_and_has_the_default_callback_timeout(tmp_path):
    catalog = load(tmp_path, CONTRACT + ROUTE)
    assert not catalog.routes["p.x@1"].is_async
    assert catalog.contracts["p.x@1"].callback_timeout_seconds == 3600


@pytest.mark.parametrize(
    ("extra", "environ", "key", "fragment"),
    [
        ("async = true\n", SECRET_ENV, "callback_secret_from_env", "is required"),
        ('async = "yes"\n', SECRET_ENV, "async", "true or false"),
        ('callback_secret_from_env = "CALLBACK_SECRET"\n', SECRET_ENV, "callback_secret", "async"),
        (
            'async = true\ncallback_secret_from_env = "NOPE"\n',
            SECRET_ENV,
            "callback_secret",
            "not set",
        ),
        (
            'async = true\ncallback_secret_from_env = "CALLBACK_SECRET"\n',
            {**ENV, "CALLBACK_SECRET": "short"},
            "callback_secret",
            "at least 32",
        ),
        ('principal_header = "Idempotency-Key"\n', ENV, "principal_header", "adapter"),
        ('principal_header = "bad header"\n', ENV, "principal_header", "header name"),
    ],
)
def test_async_route__mistakes_name_their_key(tmp_path, extra, environ, key, fragment):
    error = error_of(tmp_path, CONTRACT + ROUTE + extra, environ=environ)
    assert key in error.key and fragment in error.reason


@pytest.mark.parametrize("value", ["0", "7776001", '"1h"', "true"])
def test_callback_timeout__out_of_range_or_not_a_number_is_refused(tmp_path, value):
    error = error_of(tmp_path, CONTRACT + f"callback_timeout_seconds = {value}\n" + ROUTE)
    assert error.key.endswith(".callback_timeout_seconds")


def test_async__only_for_adapters_that_support_it(tmp_path):
    text = (
        '[contracts."x.y@1"]\neffect = "READ_ONLY"\n'
        '[routes."x.y@1"]\nadapter = "documents.verify"\n'
        'url = "http://127.0.0.1:9/docs/{documentId}"\n'
        'async = true\ncallback_secret_from_env = "CALLBACK_SECRET"\n'
    )
    assert load(tmp_path, text, environ=SECRET_ENV).routes["x.y@1"].is_async


# Automatic probes (RECONCILIATION.md#automatic-probes)
def test_catalog__probe_options__defaults_and_values(tmp_path):
    default = load(tmp_path, CONTRACT + ROUTE).contracts["p.x@1"]
    assert (default.auto_reconcile, default.lookup_authoritative) == ("found", False)
    assert default.probe_window_seconds == 900
    text = (
        CONTRACT
        + 'auto_reconcile = "found-or-absent"\nlookup_authoritative = true\n'
        + "probe_window_seconds = 86400\n"
        + ROUTE
    )
    contract = load(tmp_path, text).contracts["p.x@1"]
    assert (contract.auto_reconcile, contract.lookup_authoritative) == ("found-or-absent", True)
    assert contract.probe_window_seconds == 86400


@pytest.mark.parametrize(
    ("line", "key", "reason"),
    [
        ('auto_reconcile = "always"', "auto_reconcile", "found-or-absent"),
        ('lookup_authoritative = "yes"', "lookup_authoritative", "true or false"),
        ("probe_window_seconds = 4", "probe_window_seconds", "5"),
        ("probe_window_seconds = 86401", "probe_window_seconds", "86400"),
    ],
)
def test_catalog__probe_options__refused(tmp_path, line, key, reason):
    error = error_of(tmp_path, CONTRACT + line + "\n" + ROUTE)
    assert error.key == f'contracts."p.x@1".{key}'
    assert reason in str(error)
