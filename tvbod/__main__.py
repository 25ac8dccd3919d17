import sys

from tvbod.commands import main

sys.exit(main())
