"""The forkserver's preload where the field is goldilocks: its synthesis kernel."""

from gpu.field.goldilocks import GOLDILOCKS
from gpu.procs.preload import load

load(GOLDILOCKS)
