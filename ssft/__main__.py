import sys

from ssft.train import main

sys.exit(main())
