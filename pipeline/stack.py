"""Everything LessonSync talks to, on loopback in one process: the platform simulator, the webhook
receiver it delivers certificates to, and the environment a sync reads. Used by the demo and the tests."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dagster import DagsterInstance
from pydantic import SecretStr

from pipeline.settings import DEFAULT_APP_SECRET, load_settings
from pipeline.simulator_extra import simulator_extra
from pipeline.sync import SyncReport, run_job, run_sync
from pipeline.webhooks import WebhookSettings, create_app

with simulator_extra("the demo and test stack (pipeline.stack)"):
    from simulator import SimulatorConfig, SimulatorHandle, start_simulator
    from simulator.serving import ThreadedServer, serve_in_thread


@dataclass
class Stack:
    sim: SimulatorHandle
    receiver: ThreadedServer
    data_dir: Path
    env: dict[str, str]

    @property
    def warehouse_path(self) -> Path:
        return load_settings(data_dir=self.data_dir).warehouse_path

    def advance(self, *, hours: float) -> dict[str, int]:
        """Move the platform's clock; its certificate webhooks are in the inbox when this returns."""
        activity = self.sim.advance(hours=hours)
        if not self.sim.flush_webhooks(timeout=60):
            raise RuntimeError("the simulator could not deliver every certificate webhook within 60 s")
        return activity

    def run_env(self) -> dict[str, str]:
        # The marts judge "expired" and "expiring soon" as of the platform's clock, simulated here.
        return {**self.env, "LESSONSYNC_ANALYTICS_AS_OF": self.sim.now().isoformat()}

    def sync(self, *, instance: DagsterInstance | None = None, **options: Any) -> SyncReport:
        """`run_sync` against this stack (options as run_sync's), LESSONSYNC_* set only meanwhile."""
        with environment(self.run_env()):
            return run_sync(load_settings(), instance=instance or DagsterInstance.ephemeral(), **options)

    def run_job(self, name: str, *, instance: DagsterInstance | None = None) -> SyncReport:
        """Any job of the code location (e.g. check_warehouse) against this stack."""
        with environment(self.run_env()):
            return run_job(name, load_settings(), instance=instance or DagsterInstance.ephemeral())


@contextmanager
def local_stack(
    data_dir: Path,
    *,
    seed: int = 42,
    scale: Literal["tiny", "small", "medium", "large"] = "tiny",
    faults: str = "",
    order: Literal["last_date", "key"] = "last_date",
    page_size: int | None = None,
    new_fields: Sequence[Any] = (),
) -> Iterator[Stack]:
    """Start simulator and receiver; `Stack.env` holds the LESSONSYNC_* settings that point at them. `new_fields`:
    fields the platform begins to send after an advance (simulator/newfields.py)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)  # a fresh webhook credential per stack; never printed
    receiver_settings = WebhookSettings(
        bearer_tokens=[SecretStr(token)], inbox_path=load_settings(data_dir=data_dir).inbox_path
    )
    with ExitStack() as stack:
        receiver = stack.enter_context(
            serve_in_thread(create_app(receiver_settings), name="webhook-receiver", lifespan="on")
        )
        sim = stack.enter_context(
            start_simulator(
                SimulatorConfig(
                    seed=seed,
                    scale=scale,
                    faults=faults,
                    order=order,
                    app_secret=DEFAULT_APP_SECRET,
                    webhook_url=receiver.base_url + receiver_settings.path,
                    webhook_auth=f"bearer:{token}",
                    new_fields=new_fields,
                )
            )
        )
        # Both sides are given the secret: the simulator's own default is not the product's business.
        env = {
            "LESSONSYNC_BASE_URL": sim.base_url,
            "LESSONSYNC_APP_SECRET": DEFAULT_APP_SECRET,
            "LESSONSYNC_DATA_DIR": str(data_dir),
        }
        if page_size is not None:
            env["LESSONSYNC_PAGE_SIZE"] = str(page_size)
        yield Stack(sim, receiver, data_dir, env)


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
