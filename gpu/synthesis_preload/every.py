"""The forkserver's preload where no field was named: every field's synthesis kernel."""

from gpu.babybear import BABYBEAR
from gpu.goldilocks import GOLDILOCKS
from gpu.synthesis_preload import load

load(GOLDILOCKS, BABYBEAR)
