"""``python -m wmobs``: the same as the ``wmobs`` command."""

from wmobs._cli import main

raise SystemExit(main())
