"""The forkserver's preload where no field was named: every field's synthesis kernel."""

from gpu.field.babybear import BABYBEAR
from gpu.field.goldilocks import GOLDILOCKS
from gpu.procs.preload import load

load(GOLDILOCKS, BABYBEAR)
