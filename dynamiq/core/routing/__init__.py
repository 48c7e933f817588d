"""Routing a topic's messages (pure).

- ``subscriptions``: a topic's subscriptions and the queues a message reaches;
- ``patterns``: routing-key patterns with AMQP topic exchanges' rules;
- ``filters``: SNS filter policies on message attributes;
- ``notifications``: the SNS envelope a subscribed queue receives.
"""
