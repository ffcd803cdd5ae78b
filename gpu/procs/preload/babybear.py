"""The forkserver's preload where the field is babybear: its synthesis kernel."""

from gpu.field.babybear import BABYBEAR
from gpu.procs.preload import load

load(BABYBEAR)
