import sys

from dynamiq.cli import main

sys.exit(main())
