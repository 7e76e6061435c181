from setuptools import setup

setup(cffi_modules=["native/build_extcache.py:ffi", "native/build_nring.py:ffi"])
