"""The inspector at ``/ui`` (issue 13): browse, search with explanations, correct and
forget a tenant's memories, and watch the extraction queue, in server-rendered pages
(Jinja2, autoescaped) with htmx for partial updates; no build step, every asset in the
package. ``mount(app)`` adds it to a service (``create_app`` does)."""

from chatmem.server.ui.access import mount

__all__ = ["mount"]
