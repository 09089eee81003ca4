"""A walk of every route with hostile values in every place a request carries one: each path parameter, each
query parameter, and each value (and a key) of a JSON body. Routes and their parameters are read from the app
itself (app.routes and its OpenAPI document), so a new route is walked without being listed here."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from fastapi.routing import iter_route_contexts


@dataclass(frozen=True)
class Hostile:
    name: str
    url: str  # as it goes into a URL, percent-encoded
    json: str  # as it goes into a JSON text
    refused: bool  # every route must answer 4xx (it can never be meaningful input anywhere)
    url_refused: bool = False


def hostile_values(fifo: str) -> list[Hostile]:
    return [
        Hostile("surrogate", "%ED%A0%80", '"\\ud800"', True, url_refused=True),
        Hostile("low-surrogate-in-path", "%2Fx%2F%ED%B3%BF", '"/x/\\udcff"', True, url_refused=True),
        Hostile("nul", "a%00b", '"/x/a\\u0000b"', False, url_refused=True),
        Hostile("rlo", "a%E2%80%AEb", '"/x/\\u202etxt.exe"', False),
        Hostile("lri", "a%E2%81%A6b", '"/x/\\u2066b"', False),
        Hostile("nan", "NaN", "NaN", True),
        Hostile("infinity", "Infinity", "Infinity", True),
        Hostile("-infinity", "-Infinity", "-Infinity", True),
        Hostile("overflow", "1e400", "1e400", True),
        Hostile("huge-int", "9" * 400, "9" * 400, False),
        Hostile("past-int64", str(2**70), str(2**70), False),
        Hostile("dev-zero", "%2Fdev%2Fzero", '"/dev/zero"', False),
        Hostile("fifo", fifo.replace("/", "%2F"), json.dumps(fifo), False),
    ]


@dataclass(frozen=True)
class Probe:
    method: str
    route: str  # the route's path template
    url: str
    body: str | None
    value: Hostile
    where: str


def routes(app: FastAPI) -> list[tuple[str, str]]:
    found = []
    for route in iter_route_contexts(app.routes):
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                found.append((method, route.path))
    return found


def _plain(name: str, schema: dict[str, Any]) -> str:
    """A harmless value for a parameter, so that the one hostile value is what the route judges."""
    options = schema.get("anyOf", [schema])
    first = next((o for o in options if o.get("type") != "null"), {})
    if "enum" in first:
        return str(first["enum"][0])
    if first.get("format") == "uuid" or name.endswith("id"):
        return str(uuid.uuid4())
    return {"integer": "1", "number": "0.2", "boolean": "true"}.get(str(first.get("type")), "x")


def _parameters(app: FastAPI, method: str, path: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, 'path' or 'query', schema) from the OpenAPI document; path templates it leaves out too."""
    operation = app.openapi().get("paths", {}).get(path, {}).get(method.lower(), {})
    found = [
        (p["name"], p["in"], p.get("schema", {}))
        for p in operation.get("parameters", [])
        if p["in"] in ("path", "query")
    ]
    named = {name for name, _, _ in found}
    for match in re.finditer(r"\{(\w+)(?::path)?\}", path):
        if match.group(1) not in named:
            found.append((match.group(1), "path", {}))
    return found


def _url(path: str, values: dict[str, tuple[str, str]]) -> str:
    query = "&".join(f"{n}={v}" for n, (where, v) in values.items() if where == "query")
    for name, (where, value) in values.items():
        if where == "path":
            path = re.sub(r"\{" + name + r"(:path)?\}", value, path)
    return f"{path}?{query}" if query else path


def _leaves(value: Any, where: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(value, dict):
        yield (*where, "\x00key")  # a new key under this object
        for key, child in value.items():
            yield from _leaves(child, (*where, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _leaves(child, (*where, str(i)))
    else:
        yield where


MARK = "__HOSTILE__"


def _with(body: Any, leaf: tuple[str, ...], value: Hostile) -> str:
    """The body as JSON text with the hostile value at leaf (or as a new key's name, then its value)."""
    copy = json.loads(json.dumps(body))
    node = copy
    for part in leaf[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if leaf[-1] == "\x00key":  # a string becomes the key's name; a number, the new key's value
        is_text = value.json.startswith('"')
        node[MARK] = MARK + "value"
        text = json.dumps(copy).replace(f'"{MARK}value"', "1" if is_text else value.json, 1)
        return text.replace(f'"{MARK}"', value.json if is_text else '"k"', 1)
    if isinstance(node, list):
        node[int(leaf[-1])] = MARK
    else:
        node[leaf[-1]] = MARK
    return json.dumps(copy).replace(f'"{MARK}"', value.json, 1)


def probes(app: FastAPI, bodies: dict[tuple[str, str], Any], values: list[Hostile]) -> Iterator[Probe]:
    """Every route x every place x every hostile value, each place alone (the rest plain)."""
    for method, path in routes(app):
        parameters = _parameters(app, method, path)
        plain = {name: (where, _plain(name, schema)) for name, where, schema in parameters}
        if (method, path) == ("GET", "/v1/launch/render"):
            plain["spec"] = ("query", "%7B%7D")  # {}: refused at once, never a dry run that waits
        for place in [*plain, "extra"]:  # an unknown query parameter reaches the edge checks too
            for value in values:
                url_values = dict(plain)
                url_values[place] = (plain.get(place, ("query", ""))[0], value.url)
                yield Probe(method, path, _url(path, url_values), None, value, f"{place} in URL")
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            body = bodies.get((method, path), {})
            for leaf in _leaves(body):
                for value in values:
                    where = "body." + ".".join(p.replace("\x00key", "<key>") for p in leaf)
                    yield Probe(method, path, _url(path, plain), _with(body, leaf, value), value, where)
