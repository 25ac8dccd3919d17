import sys

from plant_adapters.cartpole.adapter import main

sys.exit(main())
