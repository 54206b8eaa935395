"""`lessonsync simulate`: serve the platform simulator over HTTP until interrupted."""

from __future__ import annotations

import argparse
import gc
import logging
from datetime import datetime

import uvicorn

from simulator.app import build_app
from simulator.config import DEFAULT_APP_SECRET, DEFAULT_START, SCALES, SimulatorConfig, redact_url
from simulator.faults import parse_faults
from simulator.newfields import KINDS, NewField, parse_new_field
from simulator.server import UVICORN_OPTIONS, build_platform
from simulator.serving import listening_socket

log = logging.getLogger("simulator")


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} needs a UTC offset, e.g. 2026-11-01T00:00:00Z")
    return moment


def _faults(text: str) -> str:
    try:
        parse_faults(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _new_field(text: str) -> NewField:
    try:
        return parse_new_field(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--seed", type=int, default=42, help="same seed, same data (default 42)")
    parser.add_argument(
        "--scale",
        choices=list(SCALES),
        default="small",
        help="tiny ~300 active lessons; small ~20k (default); medium ~200k; large ~1M",
    )
    parser.add_argument(
        "--faults",
        type=_faults,
        default="",
        help="e.g. error_rate=0.05,rate_limit_every=40,token_ttl=30,latency_ms=10,drift=0.01,truncate_rate=0.01",
    )
    parser.add_argument(
        "--first-page", type=int, choices=(0, 1), default=1, help="pageNumber of the first page (default 1)"
    )
    parser.add_argument(
        "--order",
        choices=("last_date", "key"),
        default="last_date",
        help="listing order: by lastDate then insertion (default), or insertion only",
    )
    parser.add_argument(
        "--app-secret", default=DEFAULT_APP_SECRET, help="secret POST /v1/token accepts (default: the demo secret)"
    )
    parser.add_argument("--token-ttl", type=float, default=3600.0, help="access-token lifetime, wall-clock seconds")
    parser.add_argument("--start", type=_instant, default=DEFAULT_START, help="simulated clock at startup (ISO 8601)")
    parser.add_argument("--webhook-url", default=None, help="receiver of certificate_completed/expired deliveries")
    parser.add_argument("--webhook-auth", default=None, help="bearer:TOKEN | basic:USER:PASSWORD | header:NAME:VALUE")
    parser.add_argument("--webhook-source", default="lessonsync-simulator", help="X-Webhook-Source header value")
    parser.add_argument(
        "--new-field",
        dest="new_fields",
        action="append",
        type=_new_field,
        default=[],
        metavar="RESOURCE:NAME[:KIND[:ADVANCE[:SHARE]]]",
        help="a field the platform begins to send from that simulated-time advance on (repeatable), e.g. "
        "active_lessons:quizTimeSeconds:int:1:0.5 (kinds: " + ", ".join(KINDS) + ")",
    )


def run(args: argparse.Namespace) -> int:
    try:
        config = SimulatorConfig(
            seed=args.seed,
            scale=args.scale,
            first_page=args.first_page,
            faults=args.faults,
            order=args.order,
            app_secret=args.app_secret,
            token_ttl_seconds=args.token_ttl,
            start=args.start,
            webhook_url=args.webhook_url,
            webhook_auth=args.webhook_auth,
            webhook_source=args.webhook_source,
            host=args.host,
            port=args.port,
            new_fields=args.new_fields,
        )
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as exc:
        log.error("cannot listen on %s:%s (%s): choose another --port or stop what uses it", args.host, args.port, exc)
        return 2
    platform = build_platform(config)
    # A large world is millions of long-lived objects: keep the collector off them (it doubles answer
    # throughput). Only here, in a process that is nothing but the server: embedded simulators (tests,
    # demo) share their process and must not freeze its objects.
    gc.freeze()
    host, port = sock.getsockname()[:2]
    log.info(
        "simulator listening on http://%s:%s (seed %s, scale %s, first page %s, order %s, faults %r, webhooks %s) %s",
        host,
        port,
        config.seed,
        config.scale,
        config.first_page,
        config.order,
        str(platform.faults.spec),
        redact_url(config.webhook_url) or "off",
        platform.world.counts(),
    )
    try:
        uvicorn.Server(
            uvicorn.Config(
                build_app(platform), log_level="warning", access_log=False, lifespan="off", **UVICORN_OPTIONS
            )
        ).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled: a normal stop, not an error
        pass
    finally:
        if platform.webhooks is not None:
            platform.webhooks.close()
    log.info("simulator stopped")
    return 0
