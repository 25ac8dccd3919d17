import sys

from plant_adapters.temperature.adapter import main

sys.exit(main())
