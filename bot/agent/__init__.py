"""The agent: loop, prompt, history, reply sanitizing and guards."""
