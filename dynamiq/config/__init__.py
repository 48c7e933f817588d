"""A node's settings, and where they are read from.

- ``checks``: how a value is checked (a rule, a secret inline or in a file);
- ``sections``: one class per section of the file (``[core]``, ``[storage]``...),
  every default in one literal, every value validated when it is made;
- ``settings``: the sections together, and the rules between them;
- ``sources``: settings read from a gcfg/INI file, the environment and flags.

The settings' names are importable from here; ``sources`` is imported by name
(only the command line and the tests read files).
"""

# Each module says what it offers in its ``__all__``; this face offers all of it.
from dynamiq.config.sections import *  # noqa: F403
from dynamiq.config.settings import *  # noqa: F403
