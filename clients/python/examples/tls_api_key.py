#!/usr/bin/env python3
"""Connects over TLS (or mutual TLS) with an API key, then asks for one completion.

Start the router with TLS and a key (``tandem-router`` flags)::

    tandem-router ... --tls-cert server.pem --tls-key server.key \\
        [--tls-client-ca ca.pem]  --api-key "$TANDEM_API_KEY"

then::

    python tls_api_key.py --endpoint localhost:50051 --ca ca.pem
    python tls_api_key.py --endpoint 10.0.0.5:50051 --ca ca.pem \\
        --cert client.pem --key client.key --server-name localhost

``--ca`` is the CA certificate that signed the server's (its presence turns TLS on);
``--cert``/``--key`` present a client certificate (mutual TLS, for a router started
with ``--tls-client-ca``); ``--server-name`` checks the server certificate against
another name than the endpoint's host. The key comes from ``--api-key`` or
``$TANDEM_API_KEY`` and travels as ``authorization: Bearer <key>`` on every call.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

try:
    import tandem_client  # noqa: F401  (installed)
except ImportError:  # a checkout: clients/python is one up
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tandem_client import TandemClient, TandemError  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="localhost:50051",
                        help="the router's gRPC host:port (default: %(default)s)")
    parser.add_argument("--ca", type=Path, help="CA certificate (PEM) for the server's cert")
    parser.add_argument("--cert", type=Path, help="client certificate (PEM), for mutual TLS")
    parser.add_argument("--key", type=Path, help="the client certificate's key (PEM)")
    parser.add_argument("--server-name", help="name to check in the server's certificate")
    parser.add_argument("--api-key", default=os.environ.get("TANDEM_API_KEY"),
                        help="API key (default: $TANDEM_API_KEY)")
    parser.add_argument("--prompt", default="The capital of France is")
    args = parser.parse_args()

    options = []
    if args.server_name:
        options.append(("grpc.ssl_target_name_override", args.server_name))
    try:
        client = TandemClient(
            args.endpoint,
            api_key=args.api_key,
            root_certificates=args.ca,      # a path or PEM bytes; None = plaintext
            certificate_chain=args.cert,    # with private_key: mutual TLS
            private_key=args.key,
            timeout=60,
            options=options,
        )
    except ValueError as err:  # unreadable certificate, cert without key, bad key...
        parser.error(str(err))

    with client:
        try:
            info = client.model_info()
            print(f"connected ({'TLS' if client.tls else 'plaintext'}"
                  f"{', API key' if args.api_key else ''}) to {info.model_name}"
                  f" ({info.architecture}, context {info.max_context_length})")
            result = client.generate(args.prompt, max_tokens=16, temperature=0)
        except TandemError as err:
            # UNAUTHENTICATED: missing or wrong key. UNAVAILABLE: also a failed TLS
            # handshake (wrong CA, name mismatch, no client certificate for mTLS).
            print(f"error: {err.code_name}: {err.message}", file=sys.stderr)
            return 1
    print(args.prompt + result.text)
    print(f"[{result.finish_reason}, {result.usage.completion_tokens} tokens]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
