"""The v2 JSON batch API.

- ``routes``: its route table, one row a route (aiohttp's table and the OpenAPI
  document come from it);
- ``handlers``: each parses a request, calls one ``Node`` method, renders the answer;
- ``front``: publish, receive and delete as the front end serves them (``api.front``);
- ``webhooks``: a topic's push subscriptions, the same ones SNS clients see;
- ``keys``: application keys, for administrators.
"""
