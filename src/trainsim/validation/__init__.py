"""Validation against published measurements, and calibration of the analytic constants."""
