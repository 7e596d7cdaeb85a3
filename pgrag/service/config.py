"""How the service was asked to run: ``pgrag serve``'s options, as one value."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pgrag.config import Settings
from pgrag.errors import InputError


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServiceConfig:
    """``settings`` is pgrag's configuration (the environment, read once); ``dsn`` the
    database (None: as the CLI finds it). Without credentials a request is refused (401),
    unless ``no_auth`` — allowed only on a loopback address — lets it through as
    ``local_principals`` (None: whatever the connecting role may read, as the CLI)."""

    settings: Settings = field(default_factory=Settings)
    dsn: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    no_auth: bool = False
    local_principals: list[str] | None = None
    pool_min: int = 2
    pool_max: int = 10
    # Seconds a request waits for a pooled connection before it is answered 503.
    pool_timeout: float = 10.0
    # Seconds SIGTERM waits for in-flight requests (streams included) before closing them.
    drain_seconds: float = 30.0
    # Cross-origin callers allowed (browser apps on another origin); none by default.
    cors_origins: tuple[str, ...] = ()
    # The largest JSON body a route reads (uploads have max_upload_bytes): a bound on the
    # memory one request may take before it is even authenticated.
    max_json_bytes: int = 8 << 20
    # Serving others (pgrag serve): warn at start when the database role is a superuser or
    # the owner. False for a tool one user runs as their own role (pgrag mcp on stdio).
    shared: bool = True
    # Load the embedding model before accepting requests (off in tests that need no model).
    warm_model: bool = True
    # The largest POST /v1/documents request body (all its files together), in bytes: 413 above.
    max_upload_bytes: int = 100 * 1024 * 1024

    def check(self) -> None:
        if self.no_auth and not is_loopback(self.host):
            raise InputError(
                f"--no-auth serves every caller without credentials, so it is allowed only on"
                f" a loopback address, not {self.host!r}: bind --host 127.0.0.1, or create"
                " API keys (pgrag keys create) and drop --no-auth"
            )
        if not 1 <= self.pool_min <= self.pool_max:
            raise InputError(
                f"--pool-size must be at least 1 (got min {self.pool_min}, max {self.pool_max})"
            )
        if self.max_upload_bytes < 1:
            raise InputError(f"--max-upload-mb must be positive, got {self.max_upload_bytes} bytes")
        if not 0 < self.port < 65536:
            raise InputError(f"--port must be 1-65535, got {self.port}")
        # The read replica's settings: said now in one line, not as a traceback at start-up.
        from pgrag.db.replica import check_dsn, max_lag_seconds, wait_seconds

        check_dsn(self.settings)
        max_lag_seconds(self.settings)
        wait_seconds(self.settings)
