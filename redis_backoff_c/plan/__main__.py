import sys

from redis_backoff_c.plan._cli import main

# Guarded, so that importing the module (stubtest does) runs nothing.
if __name__ == "__main__":
    sys.exit(main())
