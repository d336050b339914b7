"""What the tests share: each expensive run made once per test session, doubles and broken variants of trainers."""
