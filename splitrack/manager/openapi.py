"""The REST API's OpenAPI 3.1 description: GET /openapi.json serves DOCUMENT.

The request bodies' schemas (SLICE_REQUEST, JOB_REQUEST) are also what the
service checks every request against (validate.py): the description and the
checks cannot disagree. docs/slices.md explains the API with examples.
"""

from typing import Any

from splitrack.manager.steps import JOB_STEPS, SLICE_STEPS
from splitrack.params import PROCS_MAX, WAIT_MAX_S

NAME_PATTERN = "^[a-z][a-z0-9-]{0,31}$"

SLICE_REQUEST: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["name", "p"],
    "properties": {
        "name": {"type": "string", "pattern": NAME_PATTERN},
        "p": {"type": "integer", "minimum": 1, "description": "pComponents"},
        "m": {"type": "integer", "minimum": 0, "default": 0, "description": "mComponents"},
        "n": {"type": "integer", "minimum": 0, "default": 0,
              "description": "nComponents, with all their NICs"},
    },
}

JOB_REQUEST: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["argv"],
    "properties": {
        "argv": {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "procs": {"type": "integer", "minimum": 1, "maximum": PROCS_MAX, "default": 1},
        "placement": {"enum": ["pack", "spread", "auto"], "default": "spread"},
        "hints": {"type": "object", "additionalProperties": False,
                  "properties": {k: {"type": "boolean"} for k in ("cpu", "memory", "network")}},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
        "cwd": {"type": ["string", "null"], "description": "default: serve's"},
    },
}

_STEP = {"type": "object", "properties": {
    "name": {"enum": [*SLICE_STEPS, *JOB_STEPS]}, "start_s": {"type": "number"},
    "end_s": {"type": ["number", "null"]}}}
_NULLABLE_STR = {"type": ["string", "null"]}
_STRINGS = {"type": "array", "items": {"type": "string"}}

SCHEMAS: dict[str, Any] = {
    "SliceRequest": SLICE_REQUEST,
    "JobRequest": JOB_REQUEST,
    "Step": _STEP,
    "Error": {"type": "object", "required": ["error"],
              "properties": {"error": {"type": "string"}}},
    "SliceView": {"type": "object", "properties": {
        "name": {"type": "string"}, "state": {"enum": ["queued", "ready", "deleted"]},
        "request": {"type": "object", "properties": {
            k: {"type": "integer"} for k in "pmn"}},
        "components": _STRINGS, "nics": _STRINGS, "jobs": _STRINGS,
        "created_s": {"type": "number"},
        "steps": {"type": "array", "items": {"$ref": "#/components/schemas/Step"}},
        "error": _NULLABLE_STR}},
    "Job": {"type": "object", "properties": {
        "id": {"type": "string"}, "slice": {"type": "string"}, "argv": _STRINGS,
        "procs": {"type": "integer"}, "placement": {"type": "string"},
        "placed": _STRINGS, "state": {"enum": ["queued", "running", "exited", "stopped"]},
        "exit": {"type": ["integer", "null"]},
        "exits": {"type": "array", "items": {"type": ["integer", "null"]}},
        "submitted_s": {"type": "number"},
        "steps": {"type": "array", "items": {"$ref": "#/components/schemas/Step"}},
        "stdout": {"type": "string"}, "stderr": {"type": "string"},
        "error": _NULLABLE_STR}},
    "Rack": {"type": "object", "properties": {"components": {"type": "array", "items": {
        "type": "object", "properties": {"id": {"type": "string"}, "kind": {"type": "string"},
                                         "slice": _NULLABLE_STR}}}}},
}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _answer(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    why = {400: "bad request: the error names the field", 404: "no such slice or job",
           409: "conflict: the error says with what",
           503: "the rack did not answer"}
    return {str(c): _answer(why[c], _ref("Error")) for c in codes}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema,
            "description": description}


_WAIT = _query("wait", {"type": "number", "minimum": 0, "maximum": WAIT_MAX_S},
               f"answer once it is no longer queued (or running), or after this many "
               f"seconds (at most {WAIT_MAX_S:g})")
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(schema)}}}


PATHS: dict[str, Any] = {
    "/slices": {
        "get": {"summary": "the live slices (queued, ready); ?all=true: deleted ones too",
                "parameters": [_query("all", {"type": "boolean"}, "include deleted slices")],
                "responses": {"200": _answer("the slices", {"type": "object", "properties": {
                    "slices": {"type": "array", "items": _ref("SliceView")}}})}},
        "post": {"summary": "create a slice: attach-device, launch-machine",
                 "requestBody": _body("SliceRequest"),
                 "responses": {"201": _answer("granted: ready", _ref("SliceView")),
                               "202": _answer("queued (FIFO)", _ref("SliceView")),
                               **_errors(400, 409, 503)}}},
    "/slices/{name}": {
        "parameters": [_NAME],
        "get": {"summary": "one slice (a deleted one: the last of that name)",
                "parameters": [_WAIT],
                "responses": {"200": _answer("the slice", _ref("SliceView")),
                              **_errors(400, 404)}},
        "delete": {"summary": "delete a slice: detach-device, destroy-machine (a queued "
                              "one leaves the queue)",
                   "parameters": [_query("force", {"type": "boolean"},
                                         "stop its running jobs (SIGTERM, SIGKILL 2 s later)")],
                   "responses": {"200": _answer("deleted", _ref("SliceView")),
                                 **_errors(400, 404, 409, 503)}}},
    "/slices/{name}/jobs": {
        "parameters": [_NAME],
        "post": {"summary": "submit a job: prepare-task, launch-task (once the slice is ready)",
                 "requestBody": _body("JobRequest"),
                 "responses": {"202": _answer("accepted", _ref("Job")),
                               **_errors(400, 404, 409)}}},
    "/jobs": {"get": {"summary": "every job", "responses": {"200": _answer(
        "the jobs", {"type": "object", "properties": {
            "jobs": {"type": "array", "items": _ref("Job")}}})}}},
    "/jobs/{id}": {
        "parameters": [_ID],
        "get": {"summary": "one job: state, exit status, steps", "parameters": [_WAIT],
                "responses": {"200": _answer("the job", _ref("Job")), **_errors(400, 404)}}},
    "/rack": {"get": {"summary": "every component and its slice (null: free)",
                      "responses": {"200": _answer("the rack", _ref("Rack")),
                                    **_errors(503)}}},
    "/openapi.json": {"get": {"summary": "this description",
                              "responses": {"200": {"description": "OpenAPI 3.1"}}}},
}

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "splitrack rack manager",
             "description": "Slices of a running splitrack rack and their jobs, with "
                            "FlowOS-RM's lifecycle steps (docs/slices.md). Errors: the "
                            "HTTP status and {\"error\": \"...\"}.",
             "version": "1"},
    "paths": PATHS,
    "components": {"schemas": SCHEMAS},
}
