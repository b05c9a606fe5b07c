"""Unit tests of aipaas.autoscale: the services' scaling decisions."""
