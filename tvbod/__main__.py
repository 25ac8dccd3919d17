import sys

from tvbod.cli import main

sys.exit(main())
