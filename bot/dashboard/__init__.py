"""The local dashboard: an ASGI app (Starlette + Jinja2 + server-sent events) served inside
`roost run`'s event loop. Nothing here is imported while the dashboard is off
(ROOST_DASHBOARD__LISTEN empty): `bot.cli` imports it only to serve it.

    login.py   the login token (a file in ROOST_HOME), its link, the signed session cookie
    server.py  where it listens (loopback unless allowed), uvicorn's server in Roost's loop
    web.py     the pages and their actions, each a thin caller of bot.operations
    views.py   what a page shows, built from the operations' records (timeline, charts)
"""
