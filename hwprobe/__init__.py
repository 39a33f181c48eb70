"""hwprobe"""
