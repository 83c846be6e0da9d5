"""Graph level: verified rewrite rules over Relax modules and the candidate set the search picks from."""
