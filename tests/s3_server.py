"""A real S3 protocol server on 127.0.0.1 for the tests: moto's ``ThreadedMotoServer``,
with a count of the object GETs it answers (how the tests see what a pull downloads)."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

BUCKET = "soapwb-tests"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RequestLog:
    """The object GETs (path) the server answered, from every client."""

    gets: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, under: str = "") -> int:
        with self.lock:
            return sum(1 for path in self.gets if under in path)


def counting(app: Any, log: RequestLog) -> Any:
    """``app`` (WSGI) noting each GET of an object (a path below a bucket, no query)."""

    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if (
            environ.get("REQUEST_METHOD") == "GET"
            and not environ.get("QUERY_STRING")
            and path.count("/") >= 2
        ):
            with log.lock:
                log.gets.append(path)
        return app(environ, start_response)

    return wrapped


@dataclass
class S3:
    """The running server: its endpoint, the storage options that reach it, a boto3
    client, and the log of GETs."""

    endpoint: str
    log: RequestLog
    client: Any

    @property
    def options(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint}

    def fresh_prefix(self) -> str:
        return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"

    def read(self, url: str) -> bytes:
        bucket, _, key = url.removeprefix("s3://").partition("/")
        return bytes(self.client.get_object(Bucket=bucket, Key=key)["Body"].read())

    def put(self, url: str, data: bytes) -> None:
        bucket, _, key = url.removeprefix("s3://").partition("/")
        self.client.put_object(Bucket=bucket, Key=key, Body=data)

    def keys(self, url: str) -> list[str]:
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
        return sorted(item["Key"][len(prefix) + 1 :] for page in pages for item in page.get("Contents", []))


def start_server() -> Iterator[S3]:
    try:
        import boto3
        from moto.moto_server.threaded_moto_server import ThreadedMotoServer
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server
    except ImportError as exc:
        pytest.skip(f"moto[server] or boto3 is not installed: {exc}")
    log = RequestLog()

    class CountingMotoServer(ThreadedMotoServer):  # type: ignore[misc]
        def _server_entry(self) -> None:
            app = counting(DomainDispatcherApplication(create_backend_app), log)
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    server = CountingMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    try:
        server.start()
    except Exception as exc:  # pragma: no cover - a machine where it cannot bind
        pytest.skip(f"the moto S3 server cannot start: {exc}")
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=BUCKET)
    try:
        yield S3(endpoint, log, client)
    finally:
        server.stop()
