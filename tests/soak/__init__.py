"""`make soak`: the real service run the way production fails, checked message
by message (issue 51). Not part of `make test`; its checks' own tests are.

- traffic.py  the seeded plan of messages and each platform's sender
- model.py    the fake model's responder: echoes each message's token, calls
              tools, streams, fails on schedule
- faults.py   kills, a SIGTERM, a database cut, platform 429/5xx/hangs
- collect.py  the facts: from the senders, the fakes, the database, the CLI, the logs
- facts.py    those facts as plain rows
- checks.py   the verdict over the facts
- report.py   the table and the JSON report
- runner.py   one variant from start to verdict; __main__.py: `python -m tests.soak`
"""
