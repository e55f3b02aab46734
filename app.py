"""GPT-OSS WebUI: one process serving the OpenAI-compatible API over the priority scheduler.

python app.py [--config config.yaml] [--preset team] [--engine sim] [--host H] [--port P]
              [--set dotted.key=value ...]
python app.py --help-config      # every config key: type, default, bounds, description
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI

from api.connection import uvicorn_settings
from api.server import create_app
from core.private_files import private_env_folder
from monitor.logs import configure_logging, install_secret_filter
from settings import Config, ConfigError, load_config
from settings.loader import warn_of_open_key_files
from wiring import Services, build_services

DEFAULT_CONFIG = Path(__file__).with_name("config.yaml")
GRADIO_CACHE = "GRADIO_TEMP_DIR"  # where Gradio keeps the page's uploads and the files it hands out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.py", description="GPT-OSS WebUI server")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="YAML config file (default: %(default)s)")
    parser.add_argument("--preset", help="a preset defined in the config file (personal, team, teaching)")
    parser.add_argument("--engine", help="engine backend, same as --set engine.backend=NAME")
    parser.add_argument("--host", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override any config key, e.g. --set scheduler.max_concurrency=4 (repeatable)",
    )
    parser.add_argument(
        "--help-config",
        action="store_true",
        help="print every config key (type, default, bounds, description) and exit",
    )
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace) -> Config:
    overrides = []
    if args.engine:
        overrides.append(f"engine.backend={args.engine}")
    if args.host:
        overrides.append(f"server.host={args.host}")
    if args.port is not None:
        overrides.append(f"server.port={args.port}")
    return load_config(args.config, args.preset, [*overrides, *args.overrides])


def build_app(
    config: Config,
    on_engine_failure: Callable[[BaseException], None] | None = None,
    config_path: str = str(DEFAULT_CONFIG),
) -> tuple[FastAPI, Services]:
    services = build_services(config)
    return app_for(services, on_engine_failure, config_path), services


def app_for(
    services: Services,
    on_engine_failure: Callable[[BaseException], None] | None = None,
    config_path: str = str(DEFAULT_CONFIG),
) -> FastAPI:
    """The API, and the page when it is on, over parts already built."""
    app = create_app(services, on_engine_failure)
    if services.config.server.ui:
        private_env_folder(GRADIO_CACHE, "gptoss-gradio-")  # before Gradio reads it (some modules on import)
        from ui.mount import mount_ui  # Gradio is imported only when the page is on

        mount_ui(app, services, config_path)
    return app


class Server(uvicorn.Server):
    """On Ctrl-C, fail waiting clients with 503 and abort engine work at once, instead of
    letting uvicorn wait for every open stream to finish. Ctrl-C is remembered for the exit code:
    uvicorn raises it again once it has shut down, yet the run has returned normally after one
    (exit 0, where 130 is the shell's code for Ctrl-C)."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], Awaitable[None]]) -> None:
        super().__init__(config)
        self._on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None
        self.interrupted = False

    async def startup(self, sockets: list | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.interrupted = self.interrupted or sig == signal.SIGINT
        if self._loop is not None and not self.should_exit:
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._on_exit()))
        super().handle_exit(sig, frame)


def main(argv: list[str] | None = None) -> int:
    failures: list[BaseException] = []
    server: Server | None = None

    def engine_failed(exc: BaseException) -> None:
        failures.append(exc)
        if server is not None:
            server.should_exit = True

    try:
        args = parse_args(argv)
        if args.help_config:  # the reference docs/configuration.md holds, from the same schema
            from scripts.config_docs import render_text

            print(render_text(), end="")
            return 0
        config = build_config(args)
        app, services = build_app(config, engine_failed, args.config)
    except (ConfigError, ValueError) as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.logging)
    warn_of_open_key_files(args.config, config)
    server_config = uvicorn.Config(
        app,
        host=config.server.host,
        port=config.server.port,
        log_level=config.logging.level.lower(),
        timeout_graceful_shutdown=5,
        **uvicorn_settings(config.server),
    )
    install_secret_filter(
        [
            *config.server.api_keys,
            *config.server.admin_keys,
            *config.scheduler.priority_keys,
            *(k.key for k in config.server.keys if k.key),
        ]
    )
    server = Server(server_config, on_exit=services.scheduler.shutdown)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the captured Ctrl-C once it has shut down
        return 130
    return 1 if failures else 130 if server.interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
