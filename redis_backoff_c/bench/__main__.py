import sys

from redis_backoff_c.bench import main

sys.exit(main())
