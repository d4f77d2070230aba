import sys

from redis_backoff_c.plan._cli import main

sys.exit(main())
