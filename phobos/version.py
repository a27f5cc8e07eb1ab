# The version of Phobos, written in this one place: the package metadata
# (setup.cfg), the PTX headers, the command line's --version and the cache's
# build key read it from here, and `phobos.__version__` re-exports it.  A
# module of its own, so that the modules that need it import neither the
# package root nor, through its lazy exports, the launcher.
__version__ = "0.1.0"
