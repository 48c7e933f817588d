"""SNS push delivery (webhooks): what every layer shares of it, and the client it goes
through.

The story, one room per layer, top down:

- ``api.v2.webhooks`` and ``api.aws.push``: v2's webhook routes and SNS's
  ``http``/``https`` subscriptions (subscribe, confirm, attributes);
- ``service.push``: subscriptions made, confirmed and removed (``webhooks``), and
  the deliveries, their retries and dead letters (``pusher``);
- ``core.push``: the documents POSTed and their signatures (pure);
- here: ``client``, the HTTP client a delivery goes through (wired in by
  ``process``), and ``request``, what it sends; ``policy``, SNS's delivery
  policies and the delays between retries they give (pure); ``endpoints``, which
  endpoints a node may push to (also read by the settings).
"""
