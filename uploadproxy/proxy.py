"""`cdi-uploadproxy`: checks upload tokens and streams uploads to the PVC's upload server (cdi-facts §4.1, §4.2).

Bodies are relayed chunk by chunk in both directions, never held whole: the proxy's memory stays flat
for any image size, and a client whose connection breaks leaves a cut upstream too, which the upload
server holds for a resume.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import signal
import ssl
import sys
from pathlib import Path

import aiohttp
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cdi.api import names
from uploadproxy import backend as b
from uploadproxy import contract as c
from uploadproxy import tls
from uploadproxy.token import TokenError, public_pem, verify
from uploadproxy.tokenapi import TokenAPI, subject_access_review, verified_client

log = logging.getLogger("cdi-uploadproxy")

_BEARER = re.compile(r"^Bearer\s+([A-Za-z0-9\-._~+/]+)$", re.IGNORECASE)
_PROXIED = (c.SYNC, c.ASYNC, c.FORM, c.FORM_ASYNC, c.STATE)
# Hop-by-hop headers belong to one connection, not to the request (RFC 9110 §7.6.1).
_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "host"}
_CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "GET, POST, PUT, HEAD, OPTIONS",
         "Access-Control-Allow-Headers": "*"}
_DAY = 24 * 3600


class NotReady(Exception):
    """The PVC cannot take an upload (now or ever); the text is CDI's 503 body."""


class UploadProxy:
    def __init__(self, backend: b.Backend, *, public_key: bytes, client_ssl: ssl.SSLContext | None,
                 wait_timeout: float = 10.0, poll_interval: float = 1.0) -> None:
        self.backend = backend
        self.public_key = public_key
        self.client_ssl = client_ssl
        self.wait_timeout = wait_timeout
        self.poll_interval = poll_interval
        self._session: aiohttp.ClientSession | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=0, middlewares=[_cors])
        app.router.add_get(c.HEALTHZ, self._healthz)
        app.router.add_route("*", "/{path:.*}", self._dispatch)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parsed = c.upload_path(request.path)
        if parsed is None or parsed[1] not in _PROXIED:
            return _text(404, "404 page not found")
        if request.method == "OPTIONS":
            return web.Response(status=200)
        version, endpoint = parsed
        auth = request.headers.get("Authorization")
        if auth is None:
            return _text(400, "missing Authorization header")
        match = _BEARER.match(auth.strip())
        if match is None:
            return _text(400, "malformed Authorization header: expected 'Bearer <token>'")
        try:
            grant = verify(match.group(1), self.public_key)
        except TokenError as error:
            return _text(error.status, error.message)
        if request.method == "HEAD" and endpoint == c.ASYNC:
            return web.Response(status=200)  # virtctl's probe: this proxy takes async uploads
        loop = asyncio.get_running_loop()
        try:
            name, content_type = await self._wait_ready(grant.namespace, grant.name)
        except NotReady as error:
            return _text(503, str(error))
        if content_type == "archive" and endpoint != c.STATE:
            endpoint = c.ARCHIVE
        elif content_type not in ("", "kubevirt"):
            return _text(503, f"rejecting upload request for PVC {grant.name} - upload content-type "
                              f"{content_type} is invalid")
        try:
            upstream = await loop.run_in_executor(None, self.backend.upload_server, grant.namespace, name)
        except b.NoUploadServer as error:
            return _text(503, str(error))
        return await self._forward(request, f"{upstream.url}/{version}/{endpoint}", upstream.server_hostname)

    async def _wait_ready(self, namespace: str, name: str) -> tuple[str, str]:
        """The name of the PVC that receives the data (PVC' with populators) and its content type."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_timeout
        while True:
            pvc = await loop.run_in_executor(None, self.backend.pvc, namespace, name)
            if pvc is None:
                raise NotReady(f"rejecting Upload Request for PVC {name} that doesn't exist")
            target, ready = name, False
            if ((pvc.get("spec") or {}).get("dataSourceRef") or {}).get("kind") == names.VOLUME_UPLOAD_SOURCE:
                prime = b.annotations(pvc).get(names.ANN_PVC_PRIME, "")
                pvc = await loop.run_in_executor(None, self.backend.pvc, namespace, prime) if prime else None
                target = prime
            if pvc is not None:
                notes = b.annotations(pvc)
                if names.ANN_UPLOAD_TARGET not in notes:
                    raise NotReady(f"PVC {name} is not an upload target")
                if notes.get(names.ANN_POD_PHASE) == names.SUCCEEDED:
                    raise NotReady(f"rejecting Upload Request for PVC {name} that already finished uploading")
                ready = notes.get(names.ANN_POD_READY, "").lower() == "true"
                if ready:
                    return target, notes.get(names.ANN_CONTENT_TYPE, "")
            if loop.time() >= deadline:
                raise NotReady(f"timed out waiting for the upload pod of PVC {name} to be ready")
            await asyncio.sleep(self.poll_interval)

    async def _forward(self, request: web.Request, url: str, server_hostname: str | None) -> web.StreamResponse:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=_DAY, sock_read=_DAY),
                connector=aiohttp.TCPConnector(ssl=self.client_ssl if self.client_ssl is not None else False),
                auto_decompress=False, skip_auto_headers=("User-Agent", "Content-Type"))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        headers.setdefault("User-Agent", "")
        body = request.content if request.can_read_body else None
        try:
            async with self._session.request(request.method, url, headers=headers, data=body, allow_redirects=False,
                                             server_hostname=server_hostname) as upstream:
                response = web.StreamResponse(status=upstream.status, headers={
                    k: v for k, v in upstream.headers.items() if k.lower() not in _HOP | {"content-length"}})
                if upstream.content_length is not None:
                    response.content_length = upstream.content_length
                await response.prepare(request)
                async for chunk in upstream.content.iter_chunked(1 << 16):
                    await response.write(chunk)
                await response.write_eof()
                return response
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as error:
            log.warning("forwarding to %s failed: %s", url, error)
            return _text(502, f"error in upload-proxy: {error}")


@web.middleware
async def _cors(request: web.Request, handler: web.RequestHandler) -> web.StreamResponse:
    """CDI wraps the proxy in an allow-all CORS handler so browser UIs can upload."""
    response = await handler(request)
    if not response.prepared:
        response.headers.update(_CORS)
    return response


_GO_ESCAPES = str.maketrans({"&": "&amp;", "'": "&#39;", "<": "&lt;", ">": "&gt;", '"': "&#34;"})


def _text(status: int, text: str) -> web.Response:
    """CDI's error bodies are Go's html.EscapeString of the message: the same entities here."""
    return web.Response(status=status, text=text.translate(_GO_ESCAPES))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cdi-uploadproxy", description=__doc__.split("\n")[0])
    parser.add_argument("--listen-address", default=c.DEFAULT_LISTEN_ADDRESS)
    parser.add_argument("--port", type=int, default=c.DEFAULT_PORT)
    parser.add_argument("--server-cert-dir", default=c.PROXY_SERVER_CERT_DIR, help="tls.crt and tls.key to serve")
    parser.add_argument("--client-cert-dir", default=c.PROXY_CLIENT_CERT_DIR,
                        help="tls.crt and tls.key presented to upload servers")
    parser.add_argument("--upload-server-ca", default=None, help="CA bundle of the upload servers' certificates")
    token_api = parser.add_argument_group(
        "UploadTokenRequest API", "also serve upload.cdi.kubevirt.io/v1beta1 (CDI's cdi-apiserver part) on a port "
        "of its own, for an APIService to point at")
    token_api.add_argument("--token-api-port", type=int, default=None)
    token_api.add_argument("--token-signing-key", default=None, help="PEM RSA private key the tokens are signed with")
    token_api.add_argument("--token-api-cert-dir", default=None,
                           help="tls.crt and tls.key to serve the API with (default: --server-cert-dir)")
    token_api.add_argument("--requestheader-client-ca", default=None,
                           help="CA of the API server's front-proxy client certificate: callers are then named by "
                                "X-Remote-User/Group and checked with a SubjectAccessReview (without it, any "
                                "caller that reaches the port gets tokens: keep the port private)")
    parser.add_argument("-v", dest="verbosity", default="1", help="log verbosity (accepted for CDI's pod args)")
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    signing_key = None
    if args.token_signing_key:
        loaded = serialization.load_pem_private_key(Path(args.token_signing_key).read_bytes(), password=None)
        if not isinstance(loaded, rsa.RSAPrivateKey):
            log.error("%s is not an RSA private key", args.token_signing_key)
            return 1
        signing_key = loaded
    public_key = os.environ.get(c.APISERVER_PUBLIC_KEY, "").encode() or (
        public_pem(signing_key) if signing_key is not None else b"")
    if not public_key:
        log.error("%s is not set: cannot verify upload tokens", c.APISERVER_PUBLIC_KEY)
        return 1
    server_dir, client_dir = Path(args.server_cert_dir), Path(args.client_cert_dir)
    proxy = UploadProxy(b.KubernetesBackend(), public_key=public_key, client_ssl=tls.client_context(
        ca=args.upload_server_ca, cert=str(client_dir / "tls.crt"), key=str(client_dir / "tls.key")))
    sites = [(proxy.app(), args.port, tls.server_context(cert=str(server_dir / "tls.crt"),
                                                         key=str(server_dir / "tls.key")))]
    if args.token_api_port is not None:
        if signing_key is None:
            log.error("--token-api-port needs --token-signing-key")
            return 1
        api_dir = Path(args.token_api_cert_dir or args.server_cert_dir)
        api_tls = tls.server_context(cert=str(api_dir / "tls.crt"), key=str(api_dir / "tls.key"),
                                     client_ca=args.requestheader_client_ca)
        api = TokenAPI(signing_key, authorize=subject_access_review() if args.requestheader_client_ca else None,
                       trusted_proxy=verified_client)
        sites.append((api.app(), args.token_api_port, api_tls))
    asyncio.run(_serve(sites, host=args.listen_address))
    return 0


async def _serve(sites: list[tuple[web.Application, int, ssl.SSLContext]], *, host: str) -> None:
    """Serve every app on its port until SIGTERM or SIGINT."""
    runners = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        for app, port, context in sites:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, host, port, ssl_context=context).start()
            log.info("serving %s on https://%s:%d", "the UploadTokenRequest API" if runners[1:] else "uploads",
                     host, port)
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()


if __name__ == "__main__":
    sys.exit(main())
