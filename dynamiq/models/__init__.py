"""The value types every layer stands on, shared by the server and the client.

- ``names``: names, ids and tokens as the APIs take them, and the bounds values are held to;
- ``attributes``: what a producer attaches to a message;
- ``messages``: a message sent, received, and what nodes say of it;
- ``queues``: a queue's settings and its record;
- ``topics``: what a topic keeps, and what a publish to one says.

Each is importable from here; the modules import each other, never this face.
"""

# Each module says what it offers in its ``__all__``; this face offers all of it.
from dynamiq.models.attributes import *  # noqa: F403
from dynamiq.models.messages import *  # noqa: F403
from dynamiq.models.names import *  # noqa: F403
from dynamiq.models.queues import *  # noqa: F403
from dynamiq.models.topics import *  # noqa: F403
