"""HTTP routes on the scheduler's dashboard server: ``/bacc`` and ``/bacc/stats.json``.

The scheduler's HTTP server is already running when the plugin starts (it may be
registered long after the scheduler started), so the routes are added to the live Tornado
application: a JSON handler, and the ``/bacc`` Bokeh document as one more Bokeh server
application beside distributed's own (the way ``distributed.dashboard.scheduler.connect``
adds those). Both honour the dashboard prefix (``dask scheduler --dashboard-prefix``).
"""

from __future__ import annotations

import json
import logging
import math
import weakref
from typing import Any

from tornado import httputil, web

from .plugin import PLUGIN_NAME

__all__ = ["dashboard_prefix", "install_routes", "uninstall_routes"]

logger = logging.getLogger(__name__)

# http application -> our Bokeh server application (None: routes without a page)
_installed: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _plugin(scheduler: Any) -> Any:
    return scheduler.plugins.get(PLUGIN_NAME)


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: send them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class NoSniff(web.OutputTransform):
    """``X-Content-Type-Options: nosniff`` on every response of an application: a browser
    must not read a page, script or JSON of ours as another type (the JSON may echo part
    of a request)."""

    def transform_first_chunk(
        self, status_code: int, headers: httputil.HTTPHeaders, chunk: bytes, finishing: bool
    ) -> tuple[int, httputil.HTTPHeaders, bytes]:
        headers["X-Content-Type-Options"] = "nosniff"
        return status_code, headers, chunk


class StatsHandler(web.RequestHandler):
    """``GET /bacc/stats.json``: recent coded jobs and totals; ``?token=<hex>``: one job
    with the timeline of its coded tasks."""

    def initialize(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def get(self) -> None:
        plugin = _plugin(self.scheduler)
        self.set_header("Content-Type", "application/json")
        # (NoSniff is the page's application's; this route sits on distributed's own)
        self.set_header("X-Content-Type-Options", "nosniff")
        if plugin is None:
            self.set_status(404)
            self.write(json.dumps({"error": f"scheduler plugin {PLUGIN_NAME!r} not registered"}))
            return
        token = self.get_argument("token", None)
        body = plugin.stats(token)
        if body is None:
            self.set_status(404)
            # echo a token only when it is one (hex): never the request's arbitrary text
            shown = token if token and all(c in "0123456789abcdef" for c in token) else "given"
            body = {"error": f"no coded job with the token {shown}"}
        self.write(json.dumps(_clean(body)))


def dashboard_prefix(scheduler: Any) -> str:
    """The scheduler's HTTP prefix ("" or "/something"), as its own routes were given it."""
    app = scheduler.http_application
    for sub in getattr(app, "applications", []):
        prefix = getattr(sub, "prefix", None)  # distributed's Bokeh server application
        if isinstance(prefix, str):
            return prefix.rstrip("/")
    # no dashboard: the routes distributed added itself were prefixed (e.g. /x/health)
    for rule in getattr(app.wildcard_router, "rules", []):
        pattern = getattr(getattr(rule.matcher, "regex", None), "pattern", "")
        for route in ("health$", "metrics$"):
            if pattern.endswith("/" + route):
                return pattern[: -len(route) - 1]
    return ""


def _has_dashboard(scheduler: Any) -> bool:
    try:
        from bokeh.server.server import BokehTornado
    except ImportError:
        return False
    return any(isinstance(a, BokehTornado) for a in scheduler.http_application.applications)


def install_routes(scheduler: Any) -> None:
    """Add ``/bacc/stats.json`` and (when the scheduler serves a dashboard) ``/bacc``.

    Once per scheduler: the routes find the registered plugin at request time, so a
    plugin registered again after being removed is served by the same routes.
    """
    app = getattr(scheduler, "http_application", None)
    if app is None or app in _installed:
        return
    prefix = dashboard_prefix(scheduler)
    app.add_handlers(
        r".*", [(prefix + r"/bacc/stats\.json", StatsHandler, {"scheduler": scheduler})]
    )
    page = None
    if _has_dashboard(scheduler):
        try:
            page = _add_page(scheduler, prefix)
        except Exception:  # the JSON and the metrics still work without the page
            logger.warning("dask-bacc: could not add the /bacc dashboard page", exc_info=True)
    _installed[app] = page


def _add_page(scheduler: Any, prefix: str) -> Any:
    from distributed.dashboard.core import BokehApplication
    from distributed.dashboard.scheduler import template_variables
    from tornado.ioloop import IOLoop

    from .dashboard import bacc_doc

    variables = template_variables(scheduler)
    # the dashboard's navigation bar: every page shares this list, so the link shows
    # on the existing pages too
    pages = variables.get("pages")
    if isinstance(pages, list) and "bacc" not in pages:
        pages.append("bacc")
    bokeh_app = BokehApplication(
        {"/bacc": bacc_doc},
        scheduler,
        prefix=prefix,
        template_variables=variables,
    )
    bokeh_app.add_transform(NoSniff)  # its routes are ours alone: /bacc and its scripts
    scheduler.http_application.add_application(bokeh_app)
    bokeh_app.initialize(IOLoop.current())
    bokeh_app.start()
    return bokeh_app


def uninstall_routes(scheduler: Any) -> None:
    """Stop the page's Bokeh server application (its periodic jobs) when the scheduler
    closes."""
    app = getattr(scheduler, "http_application", None)
    page = _installed.pop(app, None) if app is not None else None
    if page is not None:
        try:
            page.stop(wait=False)
        except Exception:
            logger.debug("dask-bacc: stopping the /bacc page failed", exc_info=True)
