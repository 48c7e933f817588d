"""The node's second HTTP path: its own front end, beside aiohttp.

Every connection opens here (``connection.Front``); a request of a route the
front end serves (``connection.Lookup`` says which: v2's publish, receive and
delete, from ``api.v2.front``) is read with ``http1`` and answered here, any
other is lent to aiohttp for that one request (``lent``). This room knows
HTTP and aiohttp's protocol only: no route, no handler, no engine.
"""
