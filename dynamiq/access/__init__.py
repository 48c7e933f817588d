"""Who may do what: application keys, their roles, and how fast they may call.

- ``roles``: the roles, the access each route needs, applications' namespaces;
- ``keys``: application keys, kept hashed in the store and checked once;
- ``buckets``: token buckets, a rate with a burst per key;
- ``guard``: the door a request passes: its key's principal and its rate;
- ``sigv4``: AWS Signature Version 4, verified as SQS and SNS verify it.
"""
